#include "backends/openvino/weight_memory.h"

#include <set>

#include "backends/openvino/lowering.h"
#include "backends/openvino/region_cache.h"

namespace coremlrt::backends::openvino {

bool reaches_plugin_decoded(const ir::PackedTensor& packed, bool read_decoded) {
  return !packed_decompresses(packed) || read_decoded;
}

bool reads_packed_decoded(const ir::Operation& op) {
  auto it = lowerings().find(op.type);
  return it != lowerings().end() && it->second.packed == PackedInputs::kDecoded;
}

std::string why_decoded(const ir::Operation& op) {
  return reads_packed_decoded(op) ? lowerings().at(op.type).decoded_because : std::string();
}

uint64_t weight_copy_bytes(const Region& region, const BackendOptions& options) {
  const bool released = !shares_large_constants(region);
  std::set<const ir::ConstValue*> seen;
  uint64_t bytes = 0;
  for (const ir::Operation* op : region.ops)
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings) {
        const ir::ConstValue* c = region.values.constant(binding);
        if (!c || !seen.insert(c).second || c->type.kind != ir::TypeKind::Tensor) continue;
        const uint64_t n = static_cast<uint64_t>(shape_numel(c->tensor.shape));
        if (n < 4096) continue;
        // A decoded weight (any form a convolution reads, palettes, sparse) is repacked in fp32.
        if (c->packed) {
          bytes += reaches_plugin_decoded(*c->packed, reads_packed_decoded(*op)) ? n * 4 : c->packed->stored_bytes();
          continue;
        }
        // A dense weight's pages of the weight file are dropped once the region is compiled
        // (release_constant_pages), unless ops outside it read them too: the copy then takes
        // their place, and only what it adds counts (an fp16 weight widened to fp32: its size).
        const uint64_t stored = n * dtype_size(c->tensor.dtype);
        if (c->tensor.dtype == DType::Float16) bytes += (options.low_precision ? n * 2 : n * 4) - (released ? stored : 0);
        else if (c->tensor.dtype == DType::Float32) bytes += released ? 0 : stored;
      }
  return bytes;
}

std::vector<std::pair<const ir::ConstValue*, std::string>> decoded_constants(const Region& region,
                                                                             const std::string& backend) {
  // The constants RegionBuilder::value_of decodes: forms OpenVINO has no kernels for, and the
  // packed inputs of ops whose lowering decodes them (convolution weights).
  std::vector<std::pair<const ir::ConstValue*, std::string>> out;
  std::set<const ir::ConstValue*> seen;
  for (const ir::Operation* op : region.ops) {
    const bool decoding_op = reads_packed_decoded(*op);
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings) {
        const ir::ConstValue* constant = region.values.constant(binding);
        if (!constant || !constant->packed || seen.count(constant)) continue;
        if (!reaches_plugin_decoded(*constant->packed, decoding_op)) continue;
        seen.insert(constant);
        out.emplace_back(constant, std::string("decoded to ") + dtype_name(constant->packed->dtype) + " for " + backend +
                                       (decoding_op ? " (" + why_decoded(*op) + ")" : " (it has no kernel for this form)") +
                                       " when the region is compiled, not when it is imported from the region "
                                       "cache; the copy lives in an unnamed file on a disk where one can be made, "
                                       "its pages out of memory once compiled");
      }
  }
  return out;
}

}  // namespace coremlrt::backends::openvino
