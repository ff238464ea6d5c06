// ir::ParamReader (src/ir/param_reader.h): the one reader of constant op parameters that our
// kernels and the OpenVINO lowering share.
#include "ir/param_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#include "coremlrt/error.h"

namespace coremlrt::ir {
namespace {

class MapReader : public ParamReader {
 public:
  template <class T>
  void set(const std::string& name, DType dtype, std::vector<T> values) {
    auto c = std::make_shared<ConstValue>();
    c->type.kind = TypeKind::Tensor;
    c->type.dtype = dtype;
    c->tensor = Tensor::empty(dtype, {static_cast<int64_t>(values.size())});
    std::memcpy(c->tensor.data, values.data(), values.size() * sizeof(T));
    known_[name] = c;
  }
  void set_runtime(const std::string& name) { runtime_[name] = true; }
  bool has(const std::string& param) const override { return known_.count(param) || runtime_.count(param); }

 protected:
  const ConstValue* known_value(const std::string& param) const override {
    auto it = known_.find(param);
    return it == known_.end() ? nullptr : it->second.get();
  }
  void param_error(const std::string& message) const override { fail("op 'x': ", message); }

 private:
  std::map<std::string, std::shared_ptr<ConstValue>> known_;
  std::map<std::string, bool> runtime_;
};

TEST(ParamReader, Int64IsReadExactlyAboveTwoToThe53) {
  MapReader r;
  const int64_t big = (int64_t{1} << 53) + 1;  // not a double
  r.set<int64_t>("n", DType::Int64, {big});
  r.set<int64_t>("v", DType::Int64, {big, -big, std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(r.const_int("n"), big);
  EXPECT_EQ(r.const_ints("v"), (std::vector<int64_t>{big, -big, std::numeric_limits<int64_t>::min()}));
}

TEST(ParamReader, FloatsBecomeIntegersOnlyWhenFiniteAndInRange) {
  MapReader r;
  r.set<float>("ok", DType::Float32, {-2.75f});
  r.set<float>("nan", DType::Float32, {std::nanf("")});
  r.set<double>("huge", DType::Float64, {1e30});
  r.set<float>("inf", DType::Float32, {INFINITY});
  EXPECT_EQ(r.const_int("ok"), -2);  // toward zero
  for (const char* name : {"nan", "huge", "inf"}) EXPECT_THROW(r.const_int(name), Error) << name;
  EXPECT_TRUE(std::isnan(r.const_float("nan")));  // a float read as a float stays what it is
}

TEST(ParamReader, FallbacksApplyOnlyToAbsentParameters) {
  MapReader r;
  r.set_runtime("later");
  r.set<int32_t>("pair", DType::Int32, {1, 0});
  EXPECT_EQ(r.const_int("absent", 7), 7);
  EXPECT_EQ(r.const_bools("absent", std::vector<bool>{true}), std::vector<bool>{true});
  EXPECT_EQ(r.const_bools("pair"), (std::vector<bool>{true, false}));
  EXPECT_THROW(r.const_int("absent"), Error);
  EXPECT_THROW(r.const_int("later", 3), Error);  // present but not known at load: no silent fallback
  EXPECT_THROW(r.const_int("pair"), Error);      // not a scalar
  EXPECT_THROW(r.const_string("pair"), Error);
}

}  // namespace
}  // namespace coremlrt::ir
