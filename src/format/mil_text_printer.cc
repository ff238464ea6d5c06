// Prints an ML program in the text form of model.mil (grammar: docs/design/mil-text.md).
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "coremlrt/error.h"
#include "format/mil_text.h"

namespace coremlrt::format {

namespace mil = CoreML::Specification::MILSpec;

namespace {

// Apple's compiler names opsets by iOS release in the text (func main<ios18>); CoreML9 is the
// iOS 26 opset.
std::string opset_text(const std::string& opset) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"CoreML5", "ios15"}, {"CoreML6", "ios16"}, {"CoreML7", "ios17"}, {"CoreML8", "ios18"}, {"CoreML9", "ios26"}};
  for (auto& [name, text] : kNames)
    if (opset == name) return text;
  return opset;
}

bool is_identifier(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@')) return false;
  return true;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Hexadecimal floating point ("%a") is exact: the reader gets back the same bits (NaN payloads
// aside, which the text cannot carry).
std::string float_text(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", value);
  return buffer;
}

class Printer {
 public:
  Printer(ValueReader& values, bool short_scalars) : values_(values), short_scalars_(short_scalars) {}

  std::string type(const ir::ValueType& t) const {
    switch (t.kind) {
      case ir::TypeKind::Tensor: {
        if (short_scalars_ && t.rank == 0) return mil_text_dtype_name(t.dtype);
        std::string out = std::string("tensor<") + mil_text_dtype_name(t.dtype) + ", ";
        if (t.rank < 0) return out + "[*]>";
        out += "[";
        for (size_t i = 0; i < t.dims.size(); ++i) {
          if (i) out += ", ";
          out += t.dims[i] < 0 ? "?" : std::to_string(t.dims[i]);
        }
        return out + "]>";
      }
      case ir::TypeKind::State: return "state<" + type(*t.element) + ">";
      case ir::TypeKind::List: return "list<" + type(*t.element) + ", ?>";
      case ir::TypeKind::Tuple: {
        std::string out = "tuple<";
        for (size_t i = 0; i < t.members.size(); ++i) out += (i ? ", " : "") + type(t.members[i]);
        return out + ">";
      }
      case ir::TypeKind::Dictionary: fail("dictionary-typed values cannot be written as model.mil");
    }
    return "";
  }

  // Types as the protobuf has them: the engine's types drop a dictionary's key and value types
  // (classify's probabilities output is a dict<string, fp64>), which the text keeps.
  std::string type(const mil::ValueType& proto) const {
    if (proto.has_dictionarytype())
      return "dict<" + type(proto.dictionarytype().keytype()) + ", " + type(proto.dictionarytype().valuetype()) + ">";
    return type(read_value_type(proto));
  }

  std::string element(const ir::ConstValue& value, int64_t i, const std::string& where) const {
    const Tensor& t = value.tensor;
    switch (value.type.dtype) {
      case DType::String: return quoted(value.strings.at(static_cast<size_t>(i)));
      case DType::Bool: return t.ptr<uint8_t>()[i] ? "true" : "false";
      case DType::Float16: return float_text(static_cast<double>(static_cast<float>(t.ptr<half>()[i])));
      case DType::Float32: return float_text(static_cast<double>(t.ptr<float>()[i]));
      case DType::Float64: return float_text(t.ptr<double>()[i]);
      case DType::Int8:
      case DType::Int4: return std::to_string(t.ptr<int8_t>()[i]);
      case DType::UInt8:
      case DType::UInt1:
      case DType::UInt2:
      case DType::UInt3:
      case DType::UInt4:
      case DType::UInt6: return std::to_string(t.ptr<uint8_t>()[i]);
      case DType::Int16: return std::to_string(t.ptr<int16_t>()[i]);
      case DType::UInt16: return std::to_string(t.ptr<uint16_t>()[i]);
      case DType::Int32: return std::to_string(t.ptr<int32_t>()[i]);
      case DType::UInt32: return std::to_string(t.ptr<uint32_t>()[i]);
      case DType::Int64: return std::to_string(t.ptr<int64_t>()[i]);
      case DType::UInt64: return std::to_string(t.ptr<uint64_t>()[i]);
      default:
        fail(where, ": an immediate ", dtype_name(value.type.dtype),
             " value cannot be written as model.mil text (only blob-file values of this type)");
    }
  }

  std::string value(const mil::Value& proto, const std::string& where) {
    if (proto.has_blobfilevalue()) {
      const auto& blob = proto.blobfilevalue();
      return type(read_value_type(proto.type())) + "(BLOBFILE(path = " + scalar_type("string") + "(" +
             quoted(blob.filename()) + "), offset = " + scalar_type("uint64") + "(" + std::to_string(blob.offset()) +
             ")))";
    }
    if (proto.has_immediatevalue() && (proto.immediatevalue().has_list() || proto.immediatevalue().has_tuple())) {
      // A list or tuple constant (classify's classes): its items as full values, in brackets.
      const auto& items = proto.immediatevalue().has_list() ? proto.immediatevalue().list().values()
                                                            : proto.immediatevalue().tuple().values();
      std::string out = type(proto.type()) + "([";
      for (int i = 0; i < items.size(); ++i) out += (i ? ", " : "") + value(items[i], where);
      return out + "])";
    }
    ir::ConstValue decoded = values_.read(proto, where);
    COREMLRT_CHECK(decoded.type.kind == ir::TypeKind::Tensor, where, ": a ", decoded.type.str(),
                   " immediate value cannot be written as model.mil text (only tensors and scalars)");
    std::string out = type(decoded.type) + "(";
    const int64_t count = shape_numel(decoded.tensor.shape);
    if (decoded.type.rank == 0) {
      out += element(decoded, 0, where);
    } else {
      out += "[";
      for (int64_t i = 0; i < count; ++i) out += (i ? ", " : "") + element(decoded, i, where);
      out += "]";
    }
    return out + ")";
  }

  void block_body(const mil::Block& block, int indent, std::ostringstream& out) {
    out << "{\n";
    for (const auto& op : block.operations()) operation(op, indent + 1, out);
    out << std::string(4 * indent, ' ') << "} -> (";
    for (int i = 0; i < block.outputs_size(); ++i) out << (i ? ", " : "") << name(block.outputs(i), "block output");
    out << ")";
  }

  void operation(const mil::Operation& op, int indent, std::ostringstream& out) {
    std::string where = "op of type '" + op.type() + "'";
    if (op.outputs_size()) where += " producing '" + op.outputs(0).name() + "'";
    out << std::string(4 * indent, ' ');
    for (int i = 0; i < op.outputs_size(); ++i)
      out << (i ? ", " : "") << type(op.outputs(i).type()) << " "
          << name(op.outputs(i).name(), where);
    if (op.outputs_size()) out << " = ";
    out << name(op.type(), where) << "(";
    // Sorted by parameter name, as Apple's compiler prints them.
    std::map<std::string, const mil::Argument*> inputs;
    for (const auto& [param, argument] : op.inputs()) inputs[param] = &argument;
    bool first = true;
    for (const auto& [param, argument] : inputs) {
      out << (first ? "" : ", ") << name(param, where) << " = ";
      first = false;
      const auto& bindings = argument->arguments();
      if (bindings.size() != 1) out << "(";
      for (int i = 0; i < bindings.size(); ++i) {
        if (i) out << ", ";
        if (bindings[i].has_name()) out << name(bindings[i].name(), where);
        else out << value(bindings[i].value(), where + " input '" + param + "'");
      }
      if (bindings.size() != 1) out << ")";
    }
    out << ")";
    if (!op.attributes().empty()) {
      std::map<std::string, const mil::Value*> attributes;
      for (const auto& [key, attribute] : op.attributes()) attributes[key] = &attribute;
      out << "[";
      first = true;
      for (const auto& [key, attribute] : attributes) {
        out << (first ? "" : ", ") << name(key, where) << " = " << value(*attribute, where + " attribute '" + key + "'");
        first = false;
      }
      out << "]";
    }
    for (const auto& block : op.blocks()) {
      out << " ";
      if (block.inputs_size()) {
        out << "(";
        for (int i = 0; i < block.inputs_size(); ++i)
          out << (i ? ", " : "") << type(block.inputs(i).type()) << " "
              << name(block.inputs(i).name(), where);
        out << ") ";
      }
      block_body(block, indent, out);
    }
    out << ";\n";
  }

  std::string scalar_type(const char* dtype) const {
    return short_scalars_ ? dtype : std::string("tensor<") + dtype + ", []>";
  }

 private:
  static const std::string& name(const std::string& text, const std::string& where) {
    COREMLRT_CHECK(is_identifier(text), where, ": name '", text,
                   "' is not a MIL identifier ([A-Za-z_][A-Za-z0-9_@]*), so it cannot be written as model.mil text");
    return text;
  }

  ValueReader& values_;
  bool short_scalars_;
};

// buildInfo, the one program attribute Apple's compiler prints: a string -> string dictionary.
std::string build_info(const mil::Program& program, Printer& printer, ValueReader& values) {
  auto it = program.attributes().find("buildInfo");
  if (it == program.attributes().end()) return "";
  ir::ConstValue info = values.read(it->second, "program attribute 'buildInfo'");
  const std::string string_type = printer.scalar_type("string");
  std::string out = "[buildInfo = dict<" + string_type + ", " + string_type + ">({";
  for (size_t i = 0; i + 1 < info.items.size(); i += 2) {
    const auto& key = info.items[i].strings;
    const auto& value = info.items[i + 1].strings;
    COREMLRT_CHECK(key.size() == 1 && value.size() == 1, "program attribute 'buildInfo' is not a string dictionary");
    out += std::string(i ? ", " : "") + "{" + quoted(key[0]) + ", " + quoted(value[0]) + "}";
  }
  return out + "})]\n";
}

}  // namespace

std::string print_mil_text(const mil::Program& program, ValueReader& values) {
  // iOS18 (CoreML8) and later programs are version 1.3 in the text and print scalars in short
  // form (string("x"), int32(1)); earlier ones are 1.0 and write tensor<string, []>("x").
  bool recent = false;
  for (const auto& [name, function] : program.functions()) recent |= ir::ios_version_of_opset(function.opset()) >= 18;
  Printer printer(values, recent);
  std::ostringstream out;
  out << "program(" << (recent ? "1.3" : "1.0") << ")\n" << build_info(program, printer, values) << "{\n";
  // Functions in name order (the protobuf map has none of its own), main first when present.
  std::map<std::string, const mil::Function*> functions;
  for (const auto& [name, function] : program.functions()) functions[name] = &function;
  std::vector<std::pair<std::string, const mil::Function*>> ordered;
  if (functions.count("main")) ordered.emplace_back("main", functions["main"]);
  for (const auto& [name, function] : functions)
    if (name != "main") ordered.emplace_back(name, function);
  for (const auto& [name, function] : ordered) {
    COREMLRT_CHECK(is_identifier(name), "function name '", name, "' is not a MIL identifier");
    auto block = function->block_specializations().find(function->opset());
    COREMLRT_CHECK(block != function->block_specializations().end(), "function '", name,
                   "' has no block for its opset '", function->opset(), "'");
    out << "    func " << name << "<" << opset_text(function->opset()) << ">(";
    for (int i = 0; i < function->inputs_size(); ++i) {
      const auto& input = function->inputs(i);
      COREMLRT_CHECK(is_identifier(input.name()), "function '", name, "': input name '", input.name(),
                     "' is not a MIL identifier");
      out << (i ? ", " : "") << printer.type(input.type()) << " " << input.name();
    }
    out << ") ";
    printer.block_body(block->second, 1, out);
    out << ";\n";
  }
  out << "}\n";
  return out.str();
}

const char* mil_text_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::String: return "string";
    case DType::Float16: return "fp16";
    case DType::Float32: return "fp32";
    case DType::Float64: return "fp64";
    case DType::BFloat16: return "bf16";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Int4: return "int4";
    case DType::UInt8: return "uint8";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::UInt4: return "uint4";
    case DType::UInt2: return "uint2";
    case DType::UInt1: return "uint1";
    case DType::UInt6: return "uint6";
    case DType::UInt3: return "uint3";
    case DType::Float8E4M3FN: return "fp8e4m3fn";
    case DType::Float8E5M2: return "fp8e5m2";
  }
  return "unknown";
}

std::optional<DType> dtype_from_mil_text(const std::string& name) {
  static const DType kAll[] = {DType::Bool,  DType::String, DType::Float16, DType::Float32, DType::Float64,
                               DType::BFloat16, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                               DType::Int4,  DType::UInt8,  DType::UInt16,  DType::UInt32,  DType::UInt64,
                               DType::UInt4, DType::UInt2,  DType::UInt1,   DType::UInt6,   DType::UInt3,
                               DType::Float8E4M3FN, DType::Float8E5M2};
  for (DType dtype : kAll)
    if (name == mil_text_dtype_name(dtype)) return dtype;
  return std::nullopt;
}

}  // namespace coremlrt::format
