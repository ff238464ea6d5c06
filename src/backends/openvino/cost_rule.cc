// The measurements behind each constant and exception here are in docs/reports/performance.md,
// "Measurements behind code choices" (taken on this project's 2-core machine).
#include "backends/openvino/cost_rule.h"

#include "ops/packed_weight.h"

namespace coremlrt::backends::openvino {

namespace {

// A region goes to OpenVINO when it does at least kMinRegionMacs multiply-adds or produces at
// least kMinRegionElements values: one OpenVINO call costs more than our kernels on a tiny input;
// plain fp32 elementwise work runs at about the same speed on either once it is large, while every
// matrix op, convolution and recurrent layer is faster there.
// The element threshold stays high on purpose: an elementwise fp16 region on OpenVINO computes in
// fp32 (fp16 or wider, docs/design/architecture.md law 6) where Core ML's own results, and our
// kernels, round every op to fp16; a model made only of such ops keeps Core ML's exact results
// here (the fp16 -> fp32 casts of a KV cache, say, stay on our kernels).
constexpr double kMinRegionMacs = 1 << 16;
constexpr double kMinRegionElements = 1 << 22;

// The exception for matrix-vector work (a decode step of a language model): a region whose only
// multiply-adds are matrix products of at most kMaxVectorRows rows, each reading its weight either
// - in fp16 (an fp16 program computed in fp32, region_builder.cc): memory-bound, and OpenVINO
//   reads such weights widened to fp32 where our GEMM reads fp16: twice the bytes;
// - or in fp32 (an fp32 program): our kernels read the mapped weights at about OpenVINO's speed
//   over its repacked copy, without that copy's memory; and where the copies limit gave OpenVINO
//   only some of a decoder's layers, the step ran slower than either backend alone;
// - or compressed (a packed constant, any program), for one row: our kernels decode its codes in
//   registers (src/ops/packed_dot_x86.cc and packed_dot_avx2.cc, where the CPU and the form
//   allow), and OpenVINO would hold a repacked copy of the weight and its runtime beside the
//   mapped file: about twice the memory (docs/design/compressed-weights.md).
// Recurrent layers and convolutions are not matrix-vector work of this kind (they declare no
// matrix rows: src/ops/op_cost.h).
constexpr int64_t kMaxVectorRows = 4;

bool only_matrix_vector_work(const Region& region) {
  const int ios = region.function.ios_version;
  bool any = false;
  for (const ir::Operation* op : region.ops) {
    const OpCostReader reader(*op, region.values);
    if (ops::op_macs(reader, ios) == 0) continue;
    const int64_t rows = ops::op_matrix_rows(reader, ios);
    if (rows < 0 || rows > kMaxVectorRows) return false;
    const ops::OpCost& cost = ops::cost_of(*op, ios);
    if (!cost.weights.empty())
      if (const ir::ConstValue* w = reader.constant(cost.weights.front()); w && w->packed) {
        // Where this CPU has no such loops (AVX2 only), or for forms they do not take, our
        // kernels decode panels, slower than OpenVINO's compressed kernels.
        if (rows != 1 || !ops::PackedMatrix::decodes_in_registers(*w->packed)) return false;
        any = true;
        continue;
      }
    const DType dtype = reader.type("x")->dtype;
    if (dtype != DType::Float16 && dtype != DType::Float32) return false;
    any = true;
  }
  return any;
}

}  // namespace

Verdict pays_for_a_call(const Region& region, const BackendOptions& options) {
  double total_macs = 0, elements = 0;
  for (const ir::Operation* op : region.ops) {
    total_macs += ops::op_macs(OpCostReader(*op, region.values), region.function.ios_version);
    for (const ir::NamedValue& out : op->outputs) elements += ops::cost_numel(out.type);
  }
  if (!options.low_precision && only_matrix_vector_work(region))
    return Verdict::refuse("every multiply-add of the region is in matrix-vector products (at most " +
                           std::to_string(kMaxVectorRows) +
                           " rows), which our kernels run reading the weights as stored: OpenVINO would hold copies of "
                           "them, fp16 ones widened to fp32 (backend=\"auto\"; backend=\"openvino\" forces it)");
  if (total_macs >= kMinRegionMacs || elements >= kMinRegionElements) return Verdict::claim();
  return Verdict::refuse("the region does about " + std::to_string(static_cast<int64_t>(total_macs)) +
                         " multiply-adds over " + std::to_string(static_cast<int64_t>(elements)) +
                         " elements, too little to pay for a backend call (backend=\"auto\"; "
                         "backend=\"openvino\" forces it)");
}

bool ours_on_fp32_weights(const ir::Operation& op, const ValueInfo& values, int ios_version) {
  const ops::OpCost& cost = ops::cost_of(op, ios_version);
  if (!cost.ours_on_fp32_weights) return false;
  bool any = false;
  for (const std::string& param : cost.weights) {
    auto it = op.inputs.find(param);
    if (it == op.inputs.end()) continue;
    for (const ir::Binding& binding : it->second) {
      const ir::ConstValue* w = values.constant(binding);
      if (!w || w->packed || !w->tensor.defined() || w->tensor.dtype != DType::Float32) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace coremlrt::backends::openvino
