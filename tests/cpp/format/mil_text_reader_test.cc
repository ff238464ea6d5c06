#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "coremlrt/error.h"
#include "format/mil_text.h"

namespace coremlrt::format {
namespace {

ir::Program parse(const std::string& body, const std::string& opset = "ios18") {
  ValueReader values(::testing::TempDir());
  return read_mil_text("program(1.3)\n{\n    func main<" + opset + ">(tensor<fp32, [2, ?, is0]> x) {\n" + body +
                           "    } -> (y);\n}\n",
                       "model.mil", values);
}

const ir::ConstValue& attribute(const ir::Operation& op, const std::string& key) { return *op.attributes.at(key); }

std::string error_of(const std::string& body) {
  try {
    parse(body);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MilTextReader, HexadecimalFloatsKeepEveryBit) {
  ir::Program p = parse(
      "        fp32 a = const()[name = string(\"a\"), val = fp32(0x1.99999ap-4)];\n"
      "        fp16 b = const()[name = string(\"b\"), val = fp16(0x1p-24)];\n"
      "        tensor<fp32, [3]> c = const()[name = string(\"c\"), val = tensor<fp32, [3]>([-inf, -0x0p+0, 1.5e3])];\n"
      "        tensor<fp32, [2, ?, ?]> y = add(x = x, y = a)[name = string(\"y\")];\n");
  const auto& ops = p.functions.at("main").block.operations;
  ASSERT_EQ(ops.size(), 4u);
  float a = attribute(ops[0], "val").tensor.ptr<float>()[0];
  EXPECT_EQ(a, 0.1f);
  half b = attribute(ops[1], "val").tensor.ptr<half>()[0];
  uint16_t bits;
  std::memcpy(&bits, &b, 2);
  EXPECT_EQ(bits, 0x0001);  // the smallest fp16 subnormal
  const float* c = attribute(ops[2], "val").tensor.ptr<float>();
  EXPECT_TRUE(std::isinf(c[0]) && c[0] < 0);
  EXPECT_TRUE(c[1] == 0 && std::signbit(c[1]));
  EXPECT_EQ(c[2], 1500.0f);
  EXPECT_EQ(ops[3].name, "y");
  EXPECT_EQ(ops[3].inputs.at("y")[0].name, "a");
}

TEST(MilTextReader, FunctionTypesOpsetsAndUnknownDims) {
  ir::Program p = parse("        tensor<fp32, [2, ?, ?]> y = relu(x = x)[name = string(\"y\")];\n", "ios16");
  const ir::Function& f = p.functions.at("main");
  EXPECT_EQ(f.opset, "CoreML6");
  EXPECT_EQ(f.ios_version, 16);
  ASSERT_EQ(f.inputs.size(), 1u);
  EXPECT_EQ(f.inputs[0].type.dims, (std::vector<int64_t>{2, -1, -1}));
  EXPECT_EQ(f.block.outputs, std::vector<std::string>{"y"});
}

TEST(MilTextReader, SeveralOutputsInEitherForm) {
  ir::Program p = parse(
      "        tensor<fp32, [1]> a, tensor<fp32, [1]> b = split(x = x, num_splits = int32(2), axis = int32(0));\n"
      "        (tensor<fp32, [1]> c, tensor<fp32, [1]> d) = split(x = x, num_splits = int32(2), axis = int32(0));\n"
      "        tensor<fp32, [2]> y = concat(values = (a, d), axis = int32(0), interleave = bool(false));\n");
  const auto& ops = p.functions.at("main").block.operations;
  EXPECT_EQ(ops[0].outputs.size(), 2u);
  EXPECT_EQ(ops[1].outputs[1].name, "d");
  ASSERT_EQ(ops[2].inputs.at("values").size(), 2u);
  EXPECT_EQ(ops[2].inputs.at("values")[1].name, "d");
  EXPECT_EQ(ops[2].inputs.at("interleave")[0].value->tensor.ptr<uint8_t>()[0], 0);
}

TEST(MilTextReader, NestedBlocksAndStrings) {
  ir::Program p = parse(
      "        tensor<fp32, [1]> y = cond(pred = bool(true))[name = string(\"q\\\"uote\\n\")] {\n"
      "            tensor<fp32, [1]> t = identity(x = x);\n"
      "        } -> (t) {\n"
      "            tensor<fp32, [1]> f = identity(x = x);\n"
      "        } -> (f);\n");
  const ir::Operation& op = p.functions.at("main").block.operations.at(0);
  EXPECT_EQ(op.name, "q\"uote\n");
  ASSERT_EQ(op.blocks.size(), 2u);
  EXPECT_EQ(op.blocks[1].outputs, std::vector<std::string>{"f"});
  EXPECT_EQ(op.blocks[0].operations.at(0).type, "identity");
}

TEST(MilTextReader, RefusesWhatItDoesNotUnderstandNamingTheLine) {
  EXPECT_NE(error_of("        int8 a = const()[val = int8(300)];\n").find("model.mil line 4: "), std::string::npos);
  EXPECT_NE(error_of("        int8 a = const()[val = int8(300)];\n").find("'300' is not a int8 value"), std::string::npos);
  EXPECT_NE(error_of("        tensor<fp32, [1]> y = relu(x = x)\n").find("line 5: expected ';'"), std::string::npos);
  EXPECT_NE(error_of("        bf16 a = const()[val = bf16(1)];\n").find("immediate bf16 values are not supported"),
            std::string::npos);
  EXPECT_NE(error_of("        fp32 a = const()[val = fp32(0x1p+0)] $\n").find("line 4: unexpected character '$'"),
            std::string::npos);
  EXPECT_NE(error_of("        fp32 a = const()[val = fp32(BLOBFILE(path = string(\"@model_path/w.bin\"), "
                     "offset = uint64(64)))];\n")
                .find("weight file"),
            std::string::npos);
}

}  // namespace
}  // namespace coremlrt::format
