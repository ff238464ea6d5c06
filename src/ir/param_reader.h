#pragma once
// One reader of an op's parameters that are known at load, for every consumer of the IR: the
// builder our kernels read them through (src/ops/kernel.h, KernelBuilder) and the OpenVINO
// lowering (src/backends/openvino/lowering.h, OpReader) both derive from it, so a parameter is
// the same number to both. Integers are read exactly, int64 included; a float read as an
// integer must be finite and in range (NaN fails), and is then truncated toward zero.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"

namespace coremlrt::ir {

class ParamReader {
 public:
  virtual ~ParamReader() = default;

  // Whether the op binds `param` (to a value or an attribute).
  virtual bool has(const std::string& param) const = 0;

  // The parameter as plain values; `fallback` when the op does not have it. Throws Error when it
  // is absent without a fallback, known only at run time, or not of a usable type or size.
  int64_t const_int(const std::string& param, std::optional<int64_t> fallback = std::nullopt) const;
  std::vector<int64_t> const_ints(const std::string& param,
                                  std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  double const_float(const std::string& param, std::optional<double> fallback = std::nullopt) const;
  bool const_bool(const std::string& param, std::optional<bool> fallback = std::nullopt) const;
  std::vector<bool> const_bools(const std::string& param,
                                std::optional<std::vector<bool>> fallback = std::nullopt) const;
  std::string const_string(const std::string& param, std::optional<std::string> fallback = std::nullopt) const;

 protected:
  // The parameter's value when known at load; nullptr when absent. For one known only at run
  // time: nullptr, or an Error of the reader's own.
  virtual const ConstValue* known_value(const std::string& param) const = 0;
  // Throws Error naming the op, then `message`.
  [[noreturn]] virtual void param_error(const std::string& message) const = 0;

 private:
  // The tensor of `param`, or nullptr when the fallback applies (absent, and `has_fallback`).
  const Tensor* tensor_or_fallback(const std::string& param, bool has_fallback) const;
  template <class T>
  std::vector<T> values(const std::string& param, const Tensor& t) const;
};

}  // namespace coremlrt::ir
