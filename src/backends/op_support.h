#pragma once
// Per backend of this build: the op types it knows and why it runs none of some (registry.cc;
// include/coremlrt/backend_ops.h is the public face).
#include <map>
#include <string>

namespace coremlrt::backends {

// "" for an op type the backend runs (for the parameters its checks accept), else why it runs
// none. Empty for "reference" and for a name this build does not have.
std::map<std::string, std::string> op_support(const std::string& backend);

}  // namespace coremlrt::backends
