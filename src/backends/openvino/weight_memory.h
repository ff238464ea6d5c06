#pragma once
// The memory rule of the OpenVINO backend (docs/design/compressed-weights.md, "OpenVINO"): what
// the copies of weights a compiled region holds add to the process, and which packed weights
// reach the plugin decoded (reported by `coremlrt info --plan`: Backend::decoded_constants).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"

namespace coremlrt::backends::openvino {

// Whether a packed constant reaches the plugin decoded rather than as its decompression pattern
// (RegionBuilder::value_of): a form OpenVINO has no kernels for, or an input of an op whose
// lowering decodes packed inputs (`read_decoded`: PackedInputs::kDecoded, a convolution's weight).
bool reaches_plugin_decoded(const ir::PackedTensor& packed, bool read_decoded);
// Whether `op`'s lowering reads its packed inputs decoded, and why (empty when it does not).
bool reads_packed_decoded(const ir::Operation& op);
std::string why_decoded(const ir::Operation& op);

// Bytes the compiled region's weight copies add to the process: fp32 for compressed weights
// decoded for it, the stored size for affine compressed weights of matrix products, which OpenVINO
// repacks; for dense weights, the copy less the weight file's pages it replaces (fp16 widened to
// fp32: their size; fp32: nothing); each constant once. Small constants (biases, norms: under
// 4,096 elements) are not weights worth counting.
uint64_t weight_copy_bytes(const Region& region, const BackendOptions& options);

// The packed constants compiling `region` decodes, each with a note for `coremlrt info --plan`.
std::vector<std::pair<const ir::ConstValue*, std::string>> decoded_constants(const Region& region,
                                                                             const std::string& backend);

}  // namespace coremlrt::backends::openvino
