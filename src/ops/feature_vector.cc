#include "ops/feature_vector.h"

#include "ops/util.h"

namespace coremlrt::ops {

Tensor constant_tensor(const KernelBuilder& b, const std::string& name, DType dtype, int rank) {
  const ir::ConstValue* value = b.constant(name);
  b.check(value != nullptr, "missing required parameter '", name, "'");
  b.check(value->type.kind == ir::TypeKind::Tensor && value->tensor.dtype == dtype && value->tensor.rank() == rank,
          "parameter '", name, "' must be a rank-", rank, " ", dtype_name(dtype), " tensor, got ", value->type.str());
  return value->tensor;
}

FeatureVector::FeatureVector(KernelBuilder& b, int64_t width) : inputs_(b.variadic_input("x")), width_(width) {
  b.check(!inputs_.empty(), "has no input features");
}

std::vector<double> FeatureVector::read(const KernelContext& ctx) const {
  std::vector<double> out;
  if (width_ > 0) out.reserve(static_cast<size_t>(width_));
  for (int index : inputs_) {
    const Tensor& t = ctx.input(index);
    const int64_t n = t.numel();
    switch (t.dtype) {
      case DType::Float64: out.insert(out.end(), t.ptr<double>(), t.ptr<double>() + n); break;
      case DType::Float32: out.insert(out.end(), t.ptr<float>(), t.ptr<float>() + n); break;
      case DType::Int32: out.insert(out.end(), t.ptr<int32_t>(), t.ptr<int32_t>() + n); break;
      case DType::Int64:
        for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<double>(t.ptr<int64_t>()[i]));
        break;
      case DType::Float16: {
        std::vector<float> widened(static_cast<size_t>(n));
        half_to_float(t.ptr<half>(), widened.data(), n);
        out.insert(out.end(), widened.begin(), widened.end());
        break;
      }
      default: ctx.fail("input features must be numbers, got ", dtype_name(t.dtype));
    }
  }
  if (width_ >= 0 && static_cast<int64_t>(out.size()) != width_)
    ctx.fail("the input features hold ", out.size(), " values; the model takes ", width_);
  return out;
}

Shape declared_output_shape(const KernelBuilder& b, int index) {
  const ir::ValueType& type = b.output_type(index);
  b.check(type.is_static(), "output ", index, " must have a static shape, got ", type.str());
  return Shape(type.dims.begin(), type.dims.end());
}

}  // namespace coremlrt::ops
