// Reads the text form of an ML program (model.mil) into ir::Program. Grammar: docs/design/mil-text.md.
// Everything not in that grammar is refused with the file name and line.
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "coremlrt/error.h"
#include "format/mil_text.h"
#include "format/mil_text_lexer.h"

namespace coremlrt::format {

namespace {

// One literal of a value, as written ("-0x1p+0", "true", a string's contents).
struct Literal {
  std::string text;
  bool is_string = false;
  int line = 0;
};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& file, ValueReader& values)
      : tokens_(std::move(tokens)), file_(file), values_(values) {}

  ir::Program program() {
    expect_identifier("program");
    expect("(");
    const Token& version = next();
    COREMLRT_CHECK(version.kind == TokenKind::Number && (version.text == "1" || version.text.rfind("1.", 0) == 0),
                   where(version), "program version '", version.text, "' is not one this build reads (1.x)");
    expect(")");
    if (peek("[")) skip_balanced();  // program attributes (buildInfo): provenance only
    expect("{");
    ir::Program out;
    while (!peek("}")) {
      ir::Function f = function();
      COREMLRT_CHECK(!out.functions.count(f.name), where(peek_token()), "function '", f.name, "' is defined twice");
      out.functions.emplace(f.name, std::move(f));
    }
    expect("}");
    COREMLRT_CHECK(peek_token().kind == TokenKind::End, where(peek_token()), "text continues after the program ends");
    COREMLRT_CHECK(!out.functions.empty(), file_, ": the program has no functions");
    return out;
  }

 private:
  ir::Function function() {
    expect_identifier("func");
    ir::Function f;
    f.name = identifier("a function name");
    expect("<");
    const Token& opset = next();
    f.opset = opset_name(opset);
    f.ios_version = ir::ios_version_of_opset(f.opset);
    COREMLRT_CHECK(f.ios_version != 0, where(opset), "function '", f.name, "' has opset '", opset.text,
                   "'; this build reads ios15..ios18, ios26 (CoreML5..CoreML9)");
    expect(">");
    f.inputs = typed_names("(", ")");
    // Function attributes (FlexibleShapeInformation, say) restate what metadata.json says about
    // flexible inputs; the shapes the engine checks come from metadata.json.
    if (peek("[")) skip_balanced();
    f.block = block_body();
    if (peek(";")) next();
    return f;
  }

  static std::string opset_name(const Token& token) {
    static const std::pair<const char*, const char*> kNames[] = {
        {"ios15", "CoreML5"}, {"ios16", "CoreML6"}, {"ios17", "CoreML7"}, {"ios18", "CoreML8"}, {"ios26", "CoreML9"}};
    for (auto& [text, name] : kNames)
      if (token.text == text) return name;
    return token.text;  // CoreML5..CoreML9 written as such
  }

  ir::Block block_body() {
    ir::Block block;
    expect("{");
    while (!peek("}")) block.operations.push_back(operation());
    expect("}");
    expect("->");
    expect("(");
    while (!peek(")")) {
      block.outputs.push_back(identifier("a block output name"));
      if (!peek(")")) expect(",");
    }
    expect(")");
    return block;
  }

  ir::Operation operation() {
    ir::Operation op;
    const Token& start = peek_token();
    const bool no_outputs = start.kind == TokenKind::Identifier && peek_at(1, "(");
    if (!no_outputs) {
      if (peek("(")) {
        op.outputs = typed_names("(", ")");
      } else {
        for (;;) {
          ir::ValueType t = type();
          op.outputs.push_back({identifier("an output name"), std::move(t)});
          if (!peek(",")) break;
          next();
        }
      }
      expect("=");
    }
    const Token& type_token = peek_token();
    op.type = identifier("an op type");
    const std::string here = where(type_token) + "op '" + op.type + "'";
    expect("(");
    while (!peek(")")) {
      std::string param = identifier("a parameter name");
      COREMLRT_CHECK(!op.inputs.count(param), here, ": parameter '", param, "' is given twice");
      expect("=");
      std::vector<ir::Binding>& bindings = op.inputs[param];
      if (peek("(")) {
        next();
        while (!peek(")")) {
          bindings.push_back(binding(here + " input '" + param + "'"));
          if (!peek(")")) expect(",");
        }
        next();
      } else {
        bindings.push_back(binding(here + " input '" + param + "'"));
      }
      if (!peek(")")) expect(",");
    }
    expect(")");
    if (peek("[")) {
      next();
      while (!peek("]")) {
        std::string key = identifier("an attribute name");
        expect("=");
        auto value = std::make_shared<ir::ConstValue>(const_value(here + " attribute '" + key + "'"));
        if (key == "name") {
          COREMLRT_CHECK(value->type.dtype == DType::String && value->strings.size() == 1, here,
                         ": attribute 'name' must be a string");
          op.name = value->strings[0];
        }
        op.attributes[key] = std::move(value);
        if (!peek("]")) expect(",");
      }
      next();
    }
    // Nested blocks (cond, while_loop): "(inputs)? { ... } -> (outputs)", one after another.
    while (peek("(") || peek("{")) {
      std::vector<ir::NamedValue> inputs;
      if (peek("(")) inputs = typed_names("(", ")");
      ir::Block block = block_body();
      block.inputs = std::move(inputs);
      op.blocks.push_back(std::move(block));
    }
    expect(";");
    return op;
  }

  std::vector<ir::NamedValue> typed_names(const char* open, const char* close) {
    std::vector<ir::NamedValue> out;
    expect(open);
    while (!peek(close)) {
      ir::ValueType t = type();
      out.push_back({identifier("a value name"), std::move(t)});
      if (!peek(close)) expect(",");
    }
    expect(close);
    return out;
  }

  ir::Binding binding(const std::string& owner) {
    ir::Binding b;
    if (starts_value()) b.value = std::make_shared<ir::ConstValue>(const_value(owner));
    else b.name = identifier("a value name or a constant");
    return b;
  }

  // A value begins with its type: a dtype or a type constructor followed by "(" or "<".
  bool starts_value() const {
    const Token& t = peek_token();
    if (t.kind != TokenKind::Identifier || !(peek_at(1, "(") || peek_at(1, "<"))) return false;
    return t.text == "tensor" || t.text == "list" || t.text == "tuple" || t.text == "dict" || t.text == "state" ||
           dtype_from_mil_text(t.text).has_value();
  }

  ir::ValueType type() {
    const Token& t = next();
    COREMLRT_CHECK(t.kind == TokenKind::Identifier, where(t), "expected a type, found '", t.text, "'");
    ir::ValueType out;
    if (t.text == "tensor") {
      expect("<");
      out.dtype = dtype_of(next());
      expect(",");
      if (peek("*")) {
        next();
        out.rank = -1;
      } else {
        expect("[");
        if (peek("*")) {
          next();
          out.rank = -1;
        } else {
          while (!peek("]")) {
            const Token& d = next();
            if (d.kind == TokenKind::Number) {
              char* end = nullptr;
              long long size = std::strtoll(d.text.c_str(), &end, 10);
              COREMLRT_CHECK(*end == '\0' && size >= 0, where(d), "bad dimension '", d.text, "'");
              out.dims.push_back(size);
            } else {
              // "?" or a symbol's name: a dimension known only at prediction time.
              COREMLRT_CHECK(d.text == "?" || d.kind == TokenKind::Identifier, where(d), "bad dimension '", d.text, "'");
              out.dims.push_back(-1);
            }
            if (!peek("]")) expect(",");
          }
          out.rank = static_cast<int64_t>(out.dims.size());
        }
        expect("]");
      }
      expect(">");
    } else if (t.text == "state") {
      out.kind = ir::TypeKind::State;
      expect("<");
      out.element = std::make_shared<ir::ValueType>(type());
      expect(">");
    } else if (t.text == "list") {
      out.kind = ir::TypeKind::List;
      expect("<");
      out.element = std::make_shared<ir::ValueType>(type());
      expect(",");
      const Token& length = next();
      COREMLRT_CHECK(length.text == "?" || length.kind == TokenKind::Number, where(length), "bad list length '",
                     length.text, "'");
      expect(">");
    } else if (t.text == "dict") {
      // Only the value kind matters to the engine (ir::ValueType keeps no key or value type).
      out.kind = ir::TypeKind::Dictionary;
      expect("<");
      type();
      expect(",");
      type();
      expect(">");
    } else if (t.text == "tuple") {
      out.kind = ir::TypeKind::Tuple;
      expect("<");
      while (!peek(">")) {
        out.members.push_back(type());
        if (!peek(">")) expect(",");
      }
      expect(">");
    } else {
      // A bare dtype is a scalar (rank-0 tensor), as iOS18 programs write them.
      out.dtype = dtype_of(t);
      out.rank = 0;
    }
    return out;
  }

  DType dtype_of(const Token& t) {
    auto dtype = dtype_from_mil_text(t.text);
    COREMLRT_CHECK(dtype.has_value(), where(t), "unknown type or element type '", t.text, "'");
    return *dtype;
  }

  ir::ConstValue const_value(const std::string& owner) {
    const Token& start = peek_token();
    ir::ValueType t = type();
    if (t.kind == ir::TypeKind::List || t.kind == ir::TypeKind::Tuple) return sequence_value(t, owner);
    COREMLRT_CHECK(t.kind == ir::TypeKind::Tensor, where(start), owner, ": a ", t.str(),
                   " constant is not supported in model.mil (only tensors, scalars, lists and tuples)");
    COREMLRT_CHECK(t.is_static(), where(start), owner, ": constant has non-static type ", t.str());
    expect("(");
    ir::ConstValue out;
    if (peek_token().kind == TokenKind::Identifier &&
        (peek_token().text == "BLOBFILE" || peek_token().text == "RAWDATA")) {
      out = blob_value(t, owner);
    } else {
      std::vector<Literal> literals;
      collect_literals(literals);
      out = tensor_value(t, literals, owner, start.line);
    }
    expect(")");
    return out;
  }

  // list<T, N>([v1, v2]) and tuple<T1, T2>([v1, v2]): items written as full values.
  ir::ConstValue sequence_value(const ir::ValueType& t, const std::string& owner) {
    ir::ConstValue out;
    out.type = t;
    expect("(");
    expect("[");
    while (!peek("]")) {
      out.items.push_back(const_value(owner));
      if (!peek("]")) expect(",");
    }
    expect("]");
    expect(")");
    return out;
  }

  // BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)): the blob whose
  // metadata record is at offset. RAWDATA(path = ..., offset = ...), coremlrt's form: the
  // tensor's bytes themselves at offset (a Core AI model's weights inside its main.mlirb).
  ir::ConstValue blob_value(const ir::ValueType& t, const std::string& owner) {
    // `owner` names the file, line and op (const_value's callers).
    const std::string form = next().text;
    expect("(");
    std::string path;
    uint64_t offset = 0;
    bool have_path = false, have_offset = false;
    while (!peek(")")) {
      std::string key = identifier("'path' or 'offset'");
      expect("=");
      ir::ConstValue v = const_value(owner + " " + form + " " + key);
      if (key == "path") {
        COREMLRT_CHECK(v.type.dtype == DType::String && v.strings.size() == 1, owner, ": ", form,
                       " path must be a string");
        path = v.strings[0];
        have_path = true;
      } else if (key == "offset") {
        COREMLRT_CHECK(v.type.dtype == DType::UInt64 && v.tensor.numel() == 1, owner, ": ", form,
                       " offset must be a uint64");
        offset = v.tensor.ptr<uint64_t>()[0];
        have_offset = true;
      } else {
        fail(owner, ": ", form, " has an unknown field '", key, "'");
      }
      if (!peek(")")) expect(",");
    }
    expect(")");
    COREMLRT_CHECK(have_path && have_offset, owner, ": ", form, " needs both path and offset");
    if (form == "RAWDATA") return values_.read_raw(t, path, offset, owner);
    return values_.read_blob(t, path, offset, owner);
  }

  void collect_literals(std::vector<Literal>& out) {
    if (peek("[")) {
      next();
      while (!peek("]")) {
        collect_literals(out);
        if (!peek("]")) expect(",");
      }
      next();
      return;
    }
    Literal literal;
    const Token& t = next();
    literal.line = t.line;
    if (t.kind == TokenKind::String) {
      literal.text = t.text;
      literal.is_string = true;
    } else if (t.text == "-" && peek_token().kind == TokenKind::Identifier) {
      literal.text = "-" + next().text;  // -inf, -nan
    } else {
      COREMLRT_CHECK(t.kind == TokenKind::Number || t.kind == TokenKind::Identifier, where(t),
                     "expected a literal value, found '", t.text, "'");
      literal.text = t.text;
    }
    out.push_back(std::move(literal));
  }

  ir::ConstValue tensor_value(const ir::ValueType& type, const std::vector<Literal>& literals,
                              const std::string& owner, int line) {
    ir::ConstValue out;
    out.type = type;
    const Shape shape(type.dims.begin(), type.dims.end());
    const int64_t count = shape_numel(shape);
    const std::string at = file_ + " line " + std::to_string(line) + ": " + owner;
    COREMLRT_CHECK(static_cast<int64_t>(literals.size()) == count, at, ": ", type.str(), " holds ", count,
                   " values but ", literals.size(), " are written");
    out.tensor = Tensor::empty(type.dtype, shape);
    for (int64_t i = 0; i < count; ++i) {
      const Literal& l = literals[static_cast<size_t>(i)];
      const std::string bad = at + ": '" + l.text + "' is not a " + mil_text_dtype_name(type.dtype) + " value";
      if (type.dtype == DType::String) {
        COREMLRT_CHECK(l.is_string, bad);
        out.strings.push_back(l.text);
        continue;
      }
      COREMLRT_CHECK(!l.is_string, bad);
      switch (type.dtype) {
        case DType::Bool:
          COREMLRT_CHECK(l.text == "true" || l.text == "false" || l.text == "0" || l.text == "1", bad);
          out.tensor.ptr<uint8_t>()[i] = l.text == "true" || l.text == "1";
          break;
        case DType::Float16: out.tensor.ptr<half>()[i] = static_cast<half>(static_cast<float>(to_double(l, bad))); break;
        case DType::Float32: out.tensor.ptr<float>()[i] = static_cast<float>(to_double(l, bad)); break;
        case DType::Float64: out.tensor.ptr<double>()[i] = to_double(l, bad); break;
        case DType::Int8: store<int8_t>(out.tensor, i, l, bad, -128, 127); break;
        case DType::Int4: store<int8_t>(out.tensor, i, l, bad, -8, 7); break;
        case DType::UInt8: store<uint8_t>(out.tensor, i, l, bad, 0, 255); break;
        case DType::UInt1: store<uint8_t>(out.tensor, i, l, bad, 0, 1); break;
        case DType::UInt2: store<uint8_t>(out.tensor, i, l, bad, 0, 3); break;
        case DType::UInt3: store<uint8_t>(out.tensor, i, l, bad, 0, 7); break;
        case DType::UInt4: store<uint8_t>(out.tensor, i, l, bad, 0, 15); break;
        case DType::UInt6: store<uint8_t>(out.tensor, i, l, bad, 0, 63); break;
        case DType::Int16: store<int16_t>(out.tensor, i, l, bad, INT16_MIN, INT16_MAX); break;
        case DType::UInt16: store<uint16_t>(out.tensor, i, l, bad, 0, UINT16_MAX); break;
        case DType::Int32: store<int32_t>(out.tensor, i, l, bad, INT32_MIN, INT32_MAX); break;
        case DType::UInt32: store<uint32_t>(out.tensor, i, l, bad, 0, UINT32_MAX); break;
        case DType::Int64: store<int64_t>(out.tensor, i, l, bad, INT64_MIN, INT64_MAX); break;
        case DType::UInt64: {
          char* end = nullptr;
          errno = 0;
          unsigned long long v = std::strtoull(l.text.c_str(), &end, 0);
          COREMLRT_CHECK(*end == '\0' && errno == 0 && l.text[0] != '-', bad);
          out.tensor.ptr<uint64_t>()[i] = v;
          break;
        }
        default:
          fail(at, ": immediate ", mil_text_dtype_name(type.dtype),
               " values are not supported in model.mil (only in BLOBFILE values)");
      }
    }
    return out;
  }

  static double to_double(const Literal& l, const std::string& bad) {
    if (l.text == "inf" || l.text == "+inf") return std::numeric_limits<double>::infinity();
    if (l.text == "-inf") return -std::numeric_limits<double>::infinity();
    if (l.text == "nan" || l.text == "-nan") return std::numeric_limits<double>::quiet_NaN();
    char* end = nullptr;
    double v = std::strtod(l.text.c_str(), &end);
    COREMLRT_CHECK(!l.text.empty() && *end == '\0', bad);
    return v;
  }

  template <class T>
  static void store(Tensor& t, int64_t i, const Literal& l, const std::string& bad, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(l.text.c_str(), &end, 0);
    COREMLRT_CHECK(!l.text.empty() && *end == '\0' && errno == 0 && v >= lo && v <= hi, bad);
    t.ptr<T>()[i] = static_cast<T>(v);
  }

  // Program and function attributes are provenance or restate metadata.json: skipped whole.
  void skip_balanced() {
    const Token& start = next();
    int depth = 1;
    while (depth > 0) {
      const Token& t = next();
      COREMLRT_CHECK(t.kind != TokenKind::End, where(start), "attribute list is not closed");
      if (t.kind != TokenKind::Punct) continue;
      if (t.text == "[" || t.text == "(" || t.text == "{") ++depth;
      if (t.text == "]" || t.text == ")" || t.text == "}") --depth;
    }
  }

  const Token& peek_token() const { return tokens_[pos_]; }
  bool peek(const char* punct) const { return peek_at(0, punct); }
  bool peek_at(size_t ahead, const char* punct) const {
    if (pos_ + ahead >= tokens_.size()) return false;
    const Token& t = tokens_[pos_ + ahead];
    return t.kind == TokenKind::Punct && t.text == punct;
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (t.kind != TokenKind::End) ++pos_;
    return t;
  }
  void expect(const char* punct) {
    const Token& t = next();
    COREMLRT_CHECK(t.kind == TokenKind::Punct && t.text == punct, where(t), "expected '", punct, "', found ",
                   describe(t));
  }
  void expect_identifier(const char* word) {
    const Token& t = next();
    COREMLRT_CHECK(t.kind == TokenKind::Identifier && t.text == word, where(t), "expected '", word, "', found ",
                   describe(t));
  }
  std::string identifier(const char* what) {
    const Token& t = next();
    COREMLRT_CHECK(t.kind == TokenKind::Identifier, where(t), "expected ", what, ", found ", describe(t));
    return t.text;
  }
  static std::string describe(const Token& t) {
    if (t.kind == TokenKind::End) return "the end of the file";
    if (t.kind == TokenKind::String) return "a string";
    return "'" + t.text + "'";
  }
  std::string where(const Token& t) const { return file_ + " line " + std::to_string(t.line) + ": "; }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::string& file_;
  ValueReader& values_;
};

}  // namespace

ir::Program read_mil_text(const std::string& text, const std::string& file_name, ValueReader& values) {
  Parser parser(mil_text_tokens(text, file_name), file_name, values);
  return parser.program();
}

}  // namespace coremlrt::format
