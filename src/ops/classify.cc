// classify (docs/design/coreml-format.md, "classify"): the last op of a classifier. It declares two outputs
// the engine's tensors cannot hold, an int64-or-string scalar label and a dictionary
// {label: probability}, so the kernel produces an encoding of both:
//   output 0: the winning class index, an int32 scalar;
//   output 1: the probabilities as a float32 vector in class order.
// The labels themselves are constants (the op's `classes`, read by src/ir/class_labels.h);
// Model::class_labels() exposes them so that a caller (the Python layer) builds the label and
// the dictionary from these two tensors. The executor checks output 0 against this encoding rather than against the
// declared label type (runtime/execute.cc).
#include <algorithm>
#include <cmath>
#include <string>

#include "ir/class_labels.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

std::unique_ptr<Kernel> make_classify(KernelBuilder& b) {
  const int probabilities = b.input("probabilities");
  const DType dp = b.input_type("probabilities").dtype;
  // fp32 per the op definition (coremltools casts to it); fp16 costs nothing to accept. The
  // classic classifiers (src/format/classic/) give fp64, as Core ML computes them in double:
  // their label is the argmax of those doubles, which fp32 could tie.
  b.check(dp == DType::Float32 || dp == DType::Float16 || dp == DType::Float64, "probabilities must be fp32, got ",
          dtype_name(dp));
  const ir::ConstValue* classes = b.constant("classes");
  b.check(classes != nullptr, "missing required parameter 'classes'");
  std::string where = "function '" + b.function().name + "', " + b.op().describe();
  const int64_t n = static_cast<int64_t>(ir::read_class_labels(*classes, where).labels.size());
  b.check(b.op().outputs.size() == 2, "expects 2 outputs (label, probabilities), the op has ", b.op().outputs.size());
  const ir::ValueType& pt = b.input_type("probabilities");
  if (pt.is_static()) {
    int64_t count = 1;
    for (int64_t d : pt.dims) count *= d;
    b.check(count == n, "probabilities has ", count, " values for ", n, " classes");
  }
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& t = ctx.input(probabilities);
    if (t.numel() != n) ctx.fail("probabilities ", shape_str(t.shape), " has ", t.numel(), " values for ", n, " classes");
    Tensor& probs = ctx.allocate_output(1, DType::Float32, {n});
    float* p = probs.ptr<float>();
    if (t.dtype == DType::Float16) half_to_float(t.ptr<half>(), p, n);
    else if (t.dtype == DType::Float32) std::copy(t.ptr<float>(), t.ptr<float>() + n, p);
    else if (t.dtype == DType::Float64) std::transform(t.ptr<double>(), t.ptr<double>() + n, p,
                                                       [](double v) { return static_cast<float>(v); });
    else ctx.fail("probabilities must be fp32, got ", dtype_name(t.dtype));
    // The first highest probability wins; NaN never does (unless every value is NaN: class 0).
    auto argmax = [n](const auto* v) {
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i)
        if (v[i] > v[best] || (std::isnan(v[best]) && !std::isnan(v[i]))) best = i;
      return best;
    };
    const int64_t best = t.dtype == DType::Float64 ? argmax(t.ptr<double>()) : argmax(p);
    ctx.allocate_output(0, DType::Int32, {}).ptr<int32_t>()[0] = static_cast<int32_t>(best);
  });
}

}  // namespace

void register_classify_kernels(KernelRegistry& registry) {
  registry.add("classify", kFloat | DTypeSet{DType::Float64}, make_classify).traits.class_index_label = true;
}

}  // namespace coremlrt::ops
