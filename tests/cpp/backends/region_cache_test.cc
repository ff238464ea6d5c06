// Which OpenVINO regions are cached (src/backends/openvino/region_cache.h): a region whose large
// constant another op of the function also reads is not, so that an imported blob never holds a
// second copy of weights the mapped file already serves.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "backends/backend.h"

#ifdef COREMLRT_TEST_OPENVINO
#include "backends/openvino/region_cache.h"

namespace coremlrt::backends::openvino {
namespace {

class Constants : public ValueInfo {
 public:
  std::map<std::string, ir::ConstValue> values;
  const ir::ValueType& type(const std::string&) const override { return type_; }
  const ir::ConstValue* constant(const std::string& name) const override {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  }

 private:
  ir::ValueType type_;
};

ir::Operation reader(const std::string& type, const std::string& input) {
  ir::Operation op;
  op.type = type;
  op.inputs["x"] = {ir::Binding{"x", nullptr}};
  op.inputs["weight"] = {ir::Binding{input, nullptr}};
  return op;
}

TEST(RegionCache, RegionsSharingLargeConstantsWithOtherOpsAreNotCached) {
  Constants constants;
  constants.values["table"].tensor = Tensor::empty(DType::Float32, {512, 1024});  // 2 MiB
  constants.values["small"].tensor = Tensor::empty(DType::Float32, {16, 16});
  // A view into the table (a second const op over the same bytes of the weight file).
  constants.values["table_view"].tensor = constants.values["table"].tensor;
  ir::Function function;
  function.block.operations = {reader("gather", "table"), reader("linear", "table"), reader("gather", "small"),
                               reader("linear", "small"), reader("linear", "table_view")};
  const auto& ops = function.block.operations;
  auto region_of = [&](std::vector<const ir::Operation*> in) { return Region{function, std::move(in), {}, {}, constants}; };

  EXPECT_TRUE(shares_large_constants(region_of({&ops[0]})));           // the tied projection reads it too
  EXPECT_TRUE(shares_large_constants(region_of({&ops[0], &ops[1]})));  // and so does the view's reader
  EXPECT_FALSE(shares_large_constants(region_of({&ops[0], &ops[1], &ops[4]})));  // every reader inside
  EXPECT_FALSE(shares_large_constants(region_of({&ops[2]})));  // small constants are cached as before
}

}  // namespace
}  // namespace coremlrt::backends::openvino
#endif
