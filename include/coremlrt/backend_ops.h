#pragma once
// Which op types each execution backend of this build runs (docs/design/architecture.md,
// "Backends"); docs/reports/ops.md is written from it (scripts/gen_ops_doc.py).
#include <map>
#include <string>

namespace coremlrt {

// For a backend of this build ("openvino"): every op type it knows, mapped to "" where it runs ops
// of that type (for the parameters and types its checks accept; placements say why an op was
// refused), else to why it runs none. Empty for "reference" and for names this build lacks.
std::map<std::string, std::string> backend_op_support(const std::string& backend);

}  // namespace coremlrt
