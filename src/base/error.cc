#include "coremlrt/error.h"

#include <new>

namespace coremlrt {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadModel:
      return "bad_model";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::BadInput:
      return "bad_input";
    case ErrorKind::ResourceLimit:
      return "resource_limit";
    case ErrorKind::Internal:
      break;
  }
  return "internal";
}

void rethrow_as(ErrorKind kind) {
  try {
    throw;
  } catch (const Error& e) {
    if (e.has_kind()) throw;
    throw Error(kind, e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::ResourceLimit, "out of memory");
  }
}

}  // namespace coremlrt
