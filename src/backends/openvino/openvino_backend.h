#pragma once
// The OpenVINO execution backend: a region of a function lowered to an ov::Model (one file per
// op family in this folder, vocabulary in lowering.h) and compiled by OpenVINO's CPU plugin.
// This header is the only one of the folder that others include; it shows no OpenVINO type.
#include <memory>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

std::shared_ptr<const Backend> make_backend(const BackendOptions& options);

}  // namespace coremlrt::backends::openvino
