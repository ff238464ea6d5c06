#include "ops/kernel.h"

#include <iterator>
#include <limits>
#include <type_traits>

#include "ops/register.h"

namespace coremlrt::ops {

const ir::ValueType& KernelBuilder::output_type(int index) const {
  check(index >= 0 && index < static_cast<int>(op().outputs.size()), "has no output #", index);
  return op().outputs[index].type;
}

namespace {

const Tensor& const_tensor(const KernelBuilder& b, const std::string& param) {
  const ir::ConstValue* value = b.constant(param);
  b.check(value->type.kind == ir::TypeKind::Tensor, "parameter '", param, "' must be a tensor");
  return value->tensor;
}

// A floating-point parameter value as T. For an integral T the value must be finite and in T's
// range: converting anything else is undefined behaviour (a fuzzed program found
// const_int reading a float parameter of 1e30).
template <class T>
T from_float(const KernelBuilder& b, const std::string& param, double v) {
  if constexpr (std::is_integral_v<T>) {
    if (!(v >= -9.2e18 && v <= 9.2e18) ||
        (std::is_signed_v<T> && sizeof(T) < 8 &&
         (v < static_cast<double>(std::numeric_limits<T>::min()) || v > static_cast<double>(std::numeric_limits<T>::max()))))
      b.fail("parameter '", param, "' has value ", v, ", which is not an integer this op can use");
  }
  return static_cast<T>(v);
}

template <class T>
std::vector<T> tensor_values(const KernelBuilder& b, const std::string& param, const Tensor& t) {
  // A damaged file can declare elements its constant does not hold (a fuzzed program did).
  b.check(t.numel() == 0 || t.data != nullptr, "parameter '", param, "' declares ", t.numel(),
          " elements but holds no data");
  std::vector<T> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::Int32: out[i] = static_cast<T>(t.ptr<int32_t>()[i]); break;
      case DType::Int64: out[i] = static_cast<T>(t.ptr<int64_t>()[i]); break;
      case DType::Int16: out[i] = static_cast<T>(t.ptr<int16_t>()[i]); break;
      case DType::UInt16: out[i] = static_cast<T>(t.ptr<uint16_t>()[i]); break;
      case DType::UInt32: out[i] = static_cast<T>(t.ptr<uint32_t>()[i]); break;
      case DType::Int8: out[i] = static_cast<T>(t.ptr<int8_t>()[i]); break;
      case DType::UInt8:
      case DType::Bool: out[i] = static_cast<T>(t.ptr<uint8_t>()[i]); break;
      case DType::Float32: out[i] = from_float<T>(b, param, t.ptr<float>()[i]); break;
      case DType::Float16: out[i] = from_float<T>(b, param, static_cast<float>(t.ptr<half>()[i])); break;
      case DType::Float64: out[i] = from_float<T>(b, param, t.ptr<double>()[i]); break;
      default: b.fail("parameter '", param, "' has unsupported dtype ", dtype_name(t.dtype));
    }
  }
  return out;
}

}  // namespace

int64_t KernelBuilder::const_int(const std::string& param, std::optional<int64_t> fallback) const {
  if (!constant(param)) {
    check(fallback.has_value(), "missing required parameter '", param, "'");
    return *fallback;
  }
  const Tensor& t = const_tensor(*this, param);
  check(t.numel() == 1, "parameter '", param, "' must be a scalar, got shape ", shape_str(t.shape));
  return tensor_values<int64_t>(*this, param, t)[0];
}

std::vector<int64_t> KernelBuilder::const_ints(const std::string& param,
                                               std::optional<std::vector<int64_t>> fallback) const {
  if (!constant(param)) {
    check(fallback.has_value(), "missing required parameter '", param, "'");
    return *fallback;
  }
  return tensor_values<int64_t>(*this, param, const_tensor(*this, param));
}

double KernelBuilder::const_float(const std::string& param, std::optional<double> fallback) const {
  if (!constant(param)) {
    check(fallback.has_value(), "missing required parameter '", param, "'");
    return *fallback;
  }
  const Tensor& t = const_tensor(*this, param);
  check(t.numel() == 1, "parameter '", param, "' must be a scalar, got shape ", shape_str(t.shape));
  return tensor_values<double>(*this, param, t)[0];
}

bool KernelBuilder::const_bool(const std::string& param, std::optional<bool> fallback) const {
  return const_int(param, fallback ? std::optional<int64_t>(*fallback ? 1 : 0) : std::nullopt) != 0;
}

std::vector<bool> KernelBuilder::const_bools(const std::string& param,
                                             std::optional<std::vector<bool>> fallback) const {
  if (!constant(param)) {
    check(fallback.has_value(), "missing required parameter '", param, "'");
    return *fallback;
  }
  std::vector<bool> out;
  for (int64_t v : tensor_values<int64_t>(*this, param, const_tensor(*this, param))) out.push_back(v != 0);
  return out;
}

std::string KernelBuilder::const_string(const std::string& param, std::optional<std::string> fallback) const {
  const ir::ConstValue* value = constant(param);
  if (!value) {
    check(fallback.has_value(), "missing required parameter '", param, "'");
    return *fallback;
  }
  check(value->strings.size() == 1, "parameter '", param, "' must be a string");
  return value->strings[0];
}

std::vector<DType> DTypeSet::list() const {
  static constexpr DType kDisplayOrder[] = {
      DType::Float16, DType::Float32, DType::Float64, DType::BFloat16, DType::Float8E4M3FN, DType::Float8E5M2,
      DType::Int4,    DType::Int8,    DType::Int16,   DType::Int32,    DType::Int64,        DType::UInt1,
      DType::UInt2,   DType::UInt3,   DType::UInt4,   DType::UInt6,    DType::UInt8,        DType::UInt16,
      DType::UInt32,  DType::UInt64,  DType::Bool,    DType::String};
  static_assert(std::size(kDisplayOrder) == static_cast<size_t>(DType::String) + 1, "a dtype is missing");
  std::vector<DType> out;
  if (any_) return out;
  for (DType dtype : kDisplayOrder)
    if (contains(dtype)) out.push_back(dtype);
  return out;
}

KernelRegistry::Entry& KernelRegistry::add(const std::string& op_type, DTypeSet dtypes, KernelFactory factory,
                                           int min_ios, int max_ios) {
  for (const Entry& e : entries_)
    if (e.op_type == op_type && e.min_ios <= max_ios && min_ios <= e.max_ios)
      fail("kernel for '", op_type, "' registered twice for overlapping opsets");
  if (!dtypes.is_any() && dtypes.list().empty()) fail("kernel for '", op_type, "' accepts no dtype");
  entries_.push_back({op_type, min_ios, max_ios, dtypes, std::move(factory), OpTraits{}, {}});
  return entries_.back();
}

const KernelRegistry::Entry* KernelRegistry::find_entry(const std::string& op_type, int ios_version) const {
  for (const Entry& e : entries_)
    if (e.op_type == op_type && e.min_ios <= ios_version && ios_version <= e.max_ios) return &e;
  return nullptr;
}

const KernelFactory* KernelRegistry::find(const std::string& op_type, int ios_version) const {
  const Entry* entry = find_entry(op_type, ios_version);
  return entry ? &entry->factory : nullptr;
}

const KernelRegistry& KernelRegistry::cpu() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_cpu_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace coremlrt::ops
