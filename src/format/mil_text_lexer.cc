#include "format/mil_text_lexer.h"

#include <cctype>
#include <cstdint>

#include "coremlrt/error.h"

namespace coremlrt::format {

namespace {

class Lexer {
 public:
  Lexer(const std::string& text, const std::string& file) : text_(text), file_(file) {}

  std::vector<Token> tokens() {
    std::vector<Token> out;
    for (;;) {
      skip_space();
      Token t;
      t.line = line_;
      if (pos_ >= text_.size()) {
        out.push_back(t);
        return out;
      }
      char c = text_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        t.kind = TokenKind::Identifier;
        while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
                                       text_[pos_] == '@'))
          t.text += text_[pos_++];
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 ((c == '-' || c == '+' || c == '.') && pos_ + 1 < text_.size() &&
                  (std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])) || text_[pos_ + 1] == '.'))) {
        t.kind = TokenKind::Number;
        t.text += text_[pos_++];
        // Decimal and hexadecimal numbers with exponents: 12, -3, 1.5e-3, 0x1.8p+1.
        while (pos_ < text_.size()) {
          char d = text_[pos_];
          bool exponent_sign = (d == '-' || d == '+') && (text_[pos_ - 1] == 'p' || text_[pos_ - 1] == 'P' ||
                                                          ((text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E') &&
                                                           t.text.find_first_of("xX") == std::string::npos));
          if (std::isalnum(static_cast<unsigned char>(d)) || d == '.' || exponent_sign) t.text += text_[pos_++];
          else break;
        }
      } else if (c == '"') {
        t.kind = TokenKind::String;
        t.text = string_literal();
      } else if (c == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '>') {
        t.kind = TokenKind::Punct;
        t.text = "->";
        pos_ += 2;
      } else if (std::string("()[]{}<>,=;?*-").find(c) != std::string::npos) {
        t.kind = TokenKind::Punct;
        t.text = std::string(1, c);
        ++pos_;
      } else {
        fail(file_, " line ", line_, ": unexpected character '", std::string(1, c), "'");
      }
      out.push_back(std::move(t));
    }
  }

 private:
  void skip_space() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string string_literal() {
    const int start = line_;
    std::string out;
    ++pos_;
    for (;;) {
      COREMLRT_CHECK(pos_ < text_.size(), file_, " line ", start, ": string is not closed");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      COREMLRT_CHECK(pos_ < text_.size(), file_, " line ", line_, ": string ends in a backslash");
      char e = text_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'x': {
          COREMLRT_CHECK(pos_ + 2 <= text_.size(), file_, " line ", line_, ": bad \\x escape");
          out += static_cast<char>(std::stoi(text_.substr(pos_, 2), nullptr, 16));
          pos_ += 2;
          break;
        }
        default: fail(file_, " line ", line_, ": unknown escape '\\", std::string(1, e), "' in a string");
      }
    }
  }

  const std::string& text_;
  const std::string& file_;
  size_t pos_ = 0;
  int line_ = 1;
};


}  // namespace

std::vector<Token> mil_text_tokens(const std::string& text, const std::string& file) { return Lexer(text, file).tokens(); }

}  // namespace coremlrt::format
