#pragma once
// The one error type of the engine. Every failure the engine reports to a caller (a bad
// file, an unsupported op, a wrong input) is an Error whose message names what was wrong
// and what was expected; the Python binding maps it to an exception with the same text.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "coremlrt/utf8.h"

namespace coremlrt {

class Error : public std::runtime_error {
 public:
  // Messages quote names read from files; bytes that are not UTF-8 are escaped so that the
  // message always reaches Python as text (see coremlrt/utf8.h).
  explicit Error(const std::string& message) : std::runtime_error(escape_invalid_utf8(message)) {}
  explicit Error(const char* message) : Error(std::string(message)) {}
};

// Builds a message from streamable parts and throws it as an Error.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(message.str());
}

}  // namespace coremlrt

// Checks a condition that depends on input data (files, models, caller arrays).
#define COREMLRT_CHECK(condition, ...)            \
  do {                                            \
    if (!(condition)) ::coremlrt::fail(__VA_ARGS__); \
  } while (0)
