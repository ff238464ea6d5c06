#include "format/neural_network/reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace coremlrt::format {
namespace {

// Writes protobuf wire format by hand, so the test states the field numbers it relies on.
class Message {
 public:
  Message& varint(int field, uint64_t value) {
    key(field, 0);
    put_varint(value);
    return *this;
  }
  Message& text(int field, const std::string& value) {
    key(field, 2);
    put_varint(value.size());
    bytes_ += value;
    return *this;
  }
  Message& message(int field, const Message& value) { return text(field, value.bytes_); }
  Message& float32(int field, float value) {
    key(field, 5);
    char raw[4];
    std::memcpy(raw, &value, 4);
    bytes_.append(raw, 4);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  void key(int field, int wire_type) { put_varint(static_cast<uint64_t>(field) << 3 | wire_type); }
  void put_varint(uint64_t value) {
    do {
      bytes_.push_back(static_cast<char>((value & 0x7f) | (value > 0x7f ? 0x80 : 0)));
      value >>= 7;
    } while (value);
  }
  std::string bytes_;
};

constexpr int kLayers = 1, kArrayMapping = 5, kExactMapping = 1;
constexpr int kName = 1, kInput = 2, kOutput = 3;
constexpr int kCustom = 500, kActivation = 130, kInnerProduct = 140, kReLU = 10;

Message weights(std::initializer_list<float> values) {
  Message out;
  for (float v : values) out.float32(1, v);
  return out;
}

Message layer(const std::string& name, const std::string& input, const std::string& output) {
  return Message().text(kName, name).text(kInput, input).text(kOutput, output);
}

FunctionDescription description(Shape input_shape) {
  FunctionDescription out;
  out.name = "main";
  FeatureDescription x;
  x.name = "x";
  x.kind = FeatureKind::MultiArray;
  x.dtype = DType::Float32;
  x.shape = std::move(input_shape);
  out.inputs.push_back(x);
  FeatureDescription y;
  y.name = "y";
  y.kind = FeatureKind::MultiArray;
  out.outputs.push_back(y);
  return out;
}

TEST(NeuralNetworkReader, TranslatesInnerProductAndReluIntoLinearAndRelu) {
  Message inner_product;
  inner_product.varint(1, 3).varint(2, 2).varint(10, 1)
      .message(20, weights({1, 2, 3, 4, 5, 6}))
      .message(21, weights({0.5f, -0.5f}));
  Message network;
  network.message(kLayers, layer("fc", "x", "h").message(kInnerProduct, inner_product))
      .message(kLayers, layer("act", "h", "y").message(kActivation, Message().message(kReLU, Message())))
      .varint(kArrayMapping, kExactMapping);

  NeuralNetworkReading reading = read_neural_network(network.bytes(), description({4, 3}));
  ASSERT_EQ(reading.problem, "");
  ASSERT_EQ(reading.layers.size(), 2u);
  EXPECT_EQ(reading.layers[0].type, "innerProduct");
  EXPECT_EQ(reading.layers[1].type, "activation");
  const ir::Function& main = reading.program.functions.at("main");
  ASSERT_EQ(main.block.operations.size(), 2u);
  const ir::Operation& linear = main.block.operations[0];
  EXPECT_EQ(linear.type, "linear");
  const Tensor& w = linear.inputs.at("weight")[0].value->tensor;
  ASSERT_EQ(w.shape, (Shape{2, 3}));
  EXPECT_EQ(w.ptr<float>()[5], 6.0f);
  EXPECT_EQ(linear.inputs.at("bias")[0].value->tensor.ptr<float>()[1], -0.5f);
  EXPECT_EQ(linear.outputs[0].type.dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(main.block.operations[1].type, "relu");
  EXPECT_EQ(main.block.outputs, (std::vector<std::string>{"y"}));
}

TEST(NeuralNetworkReader, RefusesACustomLayerNamingItsClass) {
  Message network;
  network.message(kLayers, layer("conv1", "x", "y").message(kCustom, Message().text(10, "AppConvolution")))
      .varint(kArrayMapping, kExactMapping);
  NeuralNetworkReading reading = read_neural_network(network.bytes(), description({1, 3, 8, 8}));
  ASSERT_EQ(reading.layers.size(), 1u);
  EXPECT_EQ(reading.layers[0].type, "custom");
  EXPECT_EQ(reading.layers[0].name, "conv1");
  EXPECT_NE(reading.layers[0].problem.find("custom layer of class 'AppConvolution'"), std::string::npos)
      << reading.layers[0].problem;
  EXPECT_TRUE(reading.program.functions.empty());
}

// On rank 4 innerProduct folds [x1, C, H, W] into [x1, C*H*W] rows (NeuralNetwork.proto).
TEST(NeuralNetworkReader, InnerProductOnRank4BlobsFoldsTheLastThreeAxes) {
  Message inner_product;
  inner_product.varint(1, 3).varint(2, 1).message(20, weights({1, 1, 1}));
  Message network;
  network.message(kLayers, layer("fc", "x", "y").message(kInnerProduct, inner_product))
      .varint(kArrayMapping, kExactMapping);
  NeuralNetworkReading folded = read_neural_network(network.bytes(), description({2, 3, 1, 1}));
  ASSERT_EQ(folded.layers.size(), 1u);
  EXPECT_EQ(folded.layers[0].problem, "");
  EXPECT_FALSE(folded.program.functions.empty());

  NeuralNetworkReading mismatched = read_neural_network(network.bytes(), description({2, 1, 2, 2}));
  ASSERT_EQ(mismatched.layers.size(), 1u);
  EXPECT_NE(mismatched.layers[0].problem.find("expected inputChannels = 3"), std::string::npos)
      << mismatched.layers[0].problem;
  EXPECT_TRUE(mismatched.program.functions.empty());
}

// A neuralNetworkClassifier adds class labels (100 strings / 101 int64) and the probabilities
// blob (200); its program ends in classify, defining the label and dictionary outputs.
TEST(NeuralNetworkReader, ClassifierEndsInClassifyOverTheProbabilitiesBlob) {
  Message network;
  network.message(kLayers, layer("act", "x", "probs").message(kActivation, Message().message(kReLU, Message())))
      .varint(kArrayMapping, kExactMapping)
      .message(100, Message().text(1, "a").text(1, "b").text(1, "c"))
      .text(200, "probs");
  FunctionDescription function = description({3});
  function.outputs.clear();
  FeatureDescription label, probabilities;
  label.name = "classLabel";
  label.kind = FeatureKind::String;
  probabilities.name = "probs";
  probabilities.kind = FeatureKind::Dictionary;
  function.outputs = {probabilities, label};
  function.predicted_feature_name = "classLabel";
  function.predicted_probabilities_name = "probs";
  NeuralNetworkReading reading = read_neural_network(network.bytes(), function, NetworkRole::Classifier);
  ASSERT_EQ(reading.problem, "");
  const ir::Function& main = reading.program.functions.at("main");
  const ir::Operation& last = main.block.operations.back();
  EXPECT_EQ(last.type, "classify");
  ASSERT_EQ(last.outputs.size(), 2u);
  EXPECT_EQ(last.outputs[0].name, "classLabel");
  EXPECT_EQ(last.outputs[1].name, "probs");
  // The blob 'probs' was renamed aside, so the dictionary output alone carries the name.
  EXPECT_NE(last.inputs.at("probabilities")[0].name, "probs");
  EXPECT_EQ(main.block.outputs, (std::vector<std::string>{"probs", "classLabel"}));

  // Four labels for three probabilities are refused at load.
  Message mismatched;
  mismatched.message(kLayers, layer("act", "x", "probs").message(kActivation, Message().message(kReLU, Message())))
      .varint(kArrayMapping, kExactMapping)
      .message(100, Message().text(1, "a").text(1, "b").text(1, "c").text(1, "d"))
      .text(200, "probs");
  NeuralNetworkReading refused = read_neural_network(mismatched.bytes(), function, NetworkRole::Classifier);
  EXPECT_NE(refused.problem.find("holds 3 values for 4 class labels"), std::string::npos) << refused.problem;
  EXPECT_TRUE(refused.program.functions.empty());
}

FunctionDescription image_description(const std::string& color_space) {
  FunctionDescription out = description({});
  FeatureDescription& image = out.inputs[0];
  image.kind = FeatureKind::Image;
  image.color_space = color_space;
  image.image_width = 4;
  image.image_height = 2;
  return out;
}

constexpr int kPreprocessing = 2, kImageMapping = 6, kRank4ImageMapping = 1;

TEST(NeuralNetworkReader, PreprocessesABgrImageBeforeTheFirstLayer) {
  // NeuralNetworkPreprocessing {featureName = 1, scaler = 10 {channelScale = 10,
  // blueBias = 20, greenBias = 21, redBias = 22}}; BGR images take the biases as B, G, R.
  Message scaler;
  scaler.float32(10, 0.5f).float32(20, 1.0f).float32(21, 2.0f).float32(22, 3.0f);
  Message network;
  network.message(kPreprocessing, Message().text(1, "x").message(10, scaler))
      .message(kLayers, layer("act", "x", "y").message(kActivation, Message().message(kReLU, Message())));

  NeuralNetworkReading reading = read_neural_network(network.bytes(), image_description("BGR"));
  ASSERT_EQ(reading.problem, "");
  const ir::Function& main = reading.program.functions.at("main");
  ASSERT_EQ(main.inputs.size(), 1u);
  EXPECT_EQ(main.inputs[0].type.dims, (std::vector<int64_t>{1, 3, 2, 4}));
  std::vector<std::string> types;
  for (const ir::Operation& op : main.block.operations) types.push_back(op.type);
  // Rank-5 image mapping: the preprocessed [1, C, H, W] array becomes the blob [1, 1, C, H, W];
  // the output drops the [Seq, Batch] axes again.
  EXPECT_EQ(types, (std::vector<std::string>{"mul", "add", "expand_dims", "relu", "squeeze"}));
  EXPECT_EQ(main.block.operations[0].inputs.at("y")[0].value->tensor.ptr<float>()[0], 0.5f);
  const Tensor& bias = main.block.operations[1].inputs.at("y")[0].value->tensor;
  ASSERT_EQ(bias.shape, (Shape{1, 3, 1, 1}));
  EXPECT_EQ(std::vector<float>(bias.ptr<float>(), bias.ptr<float>() + 3), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(main.block.operations[2].outputs[0].type.dims, (std::vector<int64_t>{1, 1, 3, 2, 4}));
}

TEST(NeuralNetworkReader, Rank4ImageMappingKeepsTheImageBlobRank4) {
  Message network;
  network.message(kLayers, layer("act", "x", "y").message(kActivation, Message().message(kReLU, Message())))
      .varint(kArrayMapping, kExactMapping)
      .varint(kImageMapping, kRank4ImageMapping);
  NeuralNetworkReading reading = read_neural_network(network.bytes(), image_description("GRAYSCALE"));
  ASSERT_EQ(reading.problem, "");
  const ir::Function& main = reading.program.functions.at("main");
  ASSERT_EQ(main.block.operations.size(), 1u);
  EXPECT_EQ(main.block.operations[0].type, "relu");
  EXPECT_EQ(main.block.operations[0].outputs[0].type.dims, (std::vector<int64_t>{1, 1, 2, 4}));
}

TEST(NeuralNetworkReader, RefusesPreprocessingOfAnInputItDoesNotHave) {
  Message network;
  network.message(kPreprocessing, Message().text(1, "photo").message(10, Message().float32(10, 1.0f)))
      .message(kLayers, layer("act", "x", "y").message(kActivation, Message().message(kReLU, Message())));
  NeuralNetworkReading reading = read_neural_network(network.bytes(), image_description("RGB"));
  EXPECT_NE(reading.problem.find("names the input 'photo'"), std::string::npos) << reading.problem;
  EXPECT_TRUE(reading.program.functions.empty());
}

TEST(NeuralNetworkReader, NamesEveryLayerKindByFieldNumber) {
  EXPECT_EQ(network_layer_type_name(140), "innerProduct");
  EXPECT_EQ(network_layer_type_name(795), "gelu");
  EXPECT_EQ(network_layer_type_name(7), "layer #7");
}

}  // namespace
}  // namespace coremlrt::format
