#pragma once
// The one error type of the engine. Every failure the engine reports to a caller (a bad
// file, an unsupported op, a wrong input) is an Error whose message names what was wrong
// and what was expected; the Python binding maps it to an exception with the same text.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace coremlrt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
