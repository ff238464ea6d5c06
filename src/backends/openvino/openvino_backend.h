#pragma once
// The OpenVINO execution backend: a region of a function lowered to an ov::Model (one file per
// op family in this folder, vocabulary in lowering.h) and compiled by OpenVINO's CPU plugin.
// This header is the only one of the folder that others include; it shows no OpenVINO type.
#include <map>
#include <memory>
#include <string>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

std::shared_ptr<const Backend> make_backend(const BackendOptions& options);

// Every op type the backend knows: "" for one it lowers (for the parameters and types its checks
// accept), else why it runs no op of that type (unlowered.cc).
std::map<std::string, std::string> lowering_status();

}  // namespace coremlrt::backends::openvino
