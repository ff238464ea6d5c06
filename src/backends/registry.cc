// Which backends a load may use. The reference backend is not an object: it is what runs
// every op no backend took (src/runtime/partition.h).
#include <algorithm>

#include "backends/backend.h"
#include "backends/op_support.h"
#ifdef COREMLRT_WITH_OPENVINO
#include "backends/openvino/openvino_backend.h"
#endif

namespace coremlrt::backends {

std::vector<std::string> available_backends() {
  std::vector<std::string> names = {"auto", "reference"};
#ifdef COREMLRT_WITH_OPENVINO
  names.push_back("openvino");
#endif
  return names;
}

std::vector<std::shared_ptr<const Backend>> select_backends(const std::string& choice, const BackendOptions& options) {
  const std::vector<std::string> names = available_backends();
  if (std::find(names.begin(), names.end(), choice) == names.end()) {
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "'" : ", '") + name + "'";
    const bool known_elsewhere = choice == "openvino";
    fail("backend '", choice, "' is not ", known_elsewhere ? "in this build (it was built without OpenVINO)" : "known",
         "; this build accepts ", list);
  }
  std::vector<std::shared_ptr<const Backend>> out;
  if (choice == "reference") return out;
#ifdef COREMLRT_WITH_OPENVINO
  out.push_back(openvino::make_backend(options));
#endif
  return out;
}

std::map<std::string, std::string> op_support(const std::string& backend) {
#ifdef COREMLRT_WITH_OPENVINO
  if (backend == "openvino") return openvino::lowering_status();
#endif
  return {};
}

}  // namespace coremlrt::backends
