#pragma once
// The one error type of the engine. Every failure the engine reports to a caller (a bad
// file, an unsupported op, a wrong input) is an Error whose message names what was wrong
// and what was expected; the Python binding maps it to an exception with the same text, of the
// class its kind names (coremlrt.BadModelError, ...: python/src/module.cc).
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "coremlrt/utf8.h"

namespace coremlrt {

// What went wrong, for callers that act on it (the server's status codes, the CLI's exit
// status: docs/guide/limits-and-errors.md, "Error kinds").
enum class ErrorKind {
  BadModel,       // the model's files cannot be read, or contradict themselves or the format
  Unsupported,    // an op, layer, model type or feature this build does not run
  BadInput,       // what the caller passed: inputs, states, options, names
  ResourceLimit,  // a memory, size or iteration limit was reached
  Internal,       // anything else: a fault of the engine or of a library it calls
};

// "bad_model", "unsupported", "bad_input", "resource_limit", "internal": the names the Python
// classes and the server use.
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // Messages quote names read from files; bytes that are not UTF-8 are escaped so that the
  // message always reaches Python as text (see coremlrt/utf8.h).
  explicit Error(const std::string& message) : std::runtime_error(escape_invalid_utf8(message)) {}
  explicit Error(const char* message) : Error(std::string(message)) {}
  Error(ErrorKind kind, const std::string& message) : Error(message) { kind_ = kind; }

  // Most errors are raised where their kind is not known (a reader checking a field serves
  // loading and inspecting alike); the public entry points give those the kind of the work
  // they were doing (Model::load: BadModel; Model::predict: BadInput). One that reaches a caller
  // without a kind is Internal.
  ErrorKind kind() const noexcept { return kind_.value_or(ErrorKind::Internal); }
  bool has_kind() const noexcept { return kind_.has_value(); }

 private:
  std::optional<ErrorKind> kind_;
};

// Rethrows the exception being handled, an Error raised without a kind now of `kind` (the
// public entry points' catch clauses: what they read is a model, so BadModel), a failed
// allocation as a ResourceLimit Error; anything else as it is.
[[noreturn]] void rethrow_as(ErrorKind kind);

// Builds a message from streamable parts and throws it as an Error.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(message.str());
}

// The same, of the given kind.
template <class... Parts>
[[noreturn]] void fail_as(ErrorKind kind, Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw Error(kind, message.str());
}

// The same, of `cause`'s kind if it has one: for a site that adds where it happened to an error
// it caught.
template <class... Parts>
[[noreturn]] void fail_like(const Error& cause, Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  if (cause.has_kind()) throw Error(cause.kind(), message.str());
  throw Error(message.str());
}

}  // namespace coremlrt

// Checks a condition that depends on input data (files, models, caller arrays).
#define COREMLRT_CHECK(condition, ...)            \
  do {                                            \
    if (!(condition)) ::coremlrt::fail(__VA_ARGS__); \
  } while (0)

// The same, raising an Error of the given kind (coremlrt::ErrorKind).
#define COREMLRT_CHECK_AS(kind, condition, ...)                \
  do {                                                         \
    if (!(condition)) ::coremlrt::fail_as((kind), __VA_ARGS__); \
  } while (0)
