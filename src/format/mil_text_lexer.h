#pragma once
// The tokens of model.mil (docs/design/mil-text.md), for the reader (mil_text_reader.cc).
#include <string>
#include <vector>

namespace coremlrt::format {

enum class TokenKind { Identifier, Number, String, Punct, End };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // identifiers and numbers as written; strings unescaped; punctuation
  int line = 0;
};

// The tokens of `text`, ending with one of kind End; throws Error naming `file` and the line of
// anything outside the grammar's tokens.
std::vector<Token> mil_text_tokens(const std::string& text, const std::string& file);

}  // namespace coremlrt::format
