#include "runtime/default_input.h"

#include <algorithm>

#include "coremlrt/error.h"
#include "coremlrt/float_formats.h"

namespace coremlrt::runtime {

namespace {

template <class T>
void fill(Tensor& tensor, double value) {
  std::fill_n(tensor.ptr<T>(), tensor.numel(), static_cast<T>(value));
}

}  // namespace

Tensor default_input(const FeatureDescription& feature, const std::string& where) {
  if (feature.kind == FeatureKind::Sequence && feature.optional) {
    Tensor absent = Tensor::empty(DType::Int64, {1});
    absent.ptr<int64_t>()[0] = kAbsentSequenceCode;
    return absent;
  }
  COREMLRT_CHECK(feature.default_value.has_value(), where, ": missing input '", feature.name,
                 "' is optional but has no default value");
  for (int64_t dim : feature.shape)
    COREMLRT_CHECK(dim >= 0, where, ": optional input '", feature.name, "' has no fixed shape ",
                   "to fill its default value into; pass it");
  Tensor tensor = Tensor::empty(feature.dtype, feature.shape);
  double value = *feature.default_value;
  switch (feature.dtype) {
    case DType::Float32: fill<float>(tensor, value); break;
    case DType::Float16: fill<half>(tensor, value); break;
    case DType::Float64: fill<double>(tensor, value); break;
    case DType::Int32: fill<int32_t>(tensor, value); break;
    case DType::Int64: fill<int64_t>(tensor, value); break;
    case DType::Int8: fill<int8_t>(tensor, value); break;
    default:
      fail(where, ": optional input '", feature.name, "' has dtype ", dtype_name(feature.dtype),
           ", for which this build cannot fill a default value");
  }
  return tensor;
}

}  // namespace coremlrt::runtime
