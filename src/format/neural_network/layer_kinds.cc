#include "format/neural_network/layer_kinds.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include "coremlrt/error.h"
#include "format/neural_network/reader.h"
#include "nn_control_flow.pb.h"

namespace coremlrt::format::neural_network {

using google::protobuf::internal::WireFormatLite;

LayerKind layer_kind(const nn::NeuralNetworkLayer& layer) {
  const std::string bytes = layer.SerializeAsString();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                             static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    if (field >= 100) {
      LayerKind out{field, ""};
      if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t size = 0;
        if (!in.ReadVarint32(&size) || !in.ReadString(&out.params, static_cast<int>(size))) out.params.clear();
      }
      return out;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;
  }
  return {};
}

namespace {

// The networks nested in a branch (605) or loop (615) layer; none for other kinds.
std::vector<nn::NeuralNetwork> nested_networks(const nn::NeuralNetworkLayer& layer) {
  const LayerKind kind = layer_kind(layer);
  if (kind.field == 605) {
    nn::BranchLayerParams params;
    if (params.ParseFromString(kind.params)) return {params.ifbranch(), params.elsebranch()};
  } else if (kind.field == 615) {
    nn::LoopLayerParams params;
    if (params.ParseFromString(kind.params)) return {params.conditionnetwork(), params.bodynetwork()};
  }
  return {};
}

std::string runnable_kinds() {
  std::string out;
  for (const auto& [field, translate] : layer_table()) out += (out.empty() ? "" : ", ") + network_layer_type_name(field);
  return out;
}

}  // namespace

// The blobs a layer defines: its outputs and, for a control-flow layer, every blob its nested
// networks write (Core ML makes those visible after the layer).
// loopBreak and loopContinue write the pseudo-blobs of their loop (layer_translator.h), which
// a loop layer keeps to itself.
void collect_written(const nn::NeuralNetworkLayer& layer, std::set<std::string>& out) {
  out.insert(layer.output().begin(), layer.output().end());
  const int kind = layer_kind(layer).field;
  if (kind == 620) out.insert({kLoopExitBlob, kLoopBreakBlob});
  if (kind == 625) out.insert(kLoopExitBlob);
  std::set<std::string> nested_out;
  for (const auto& network : nested_networks(layer))
    for (const auto& nested : network.layers()) collect_written(nested, nested_out);
  if (kind == 615) {
    nested_out.erase(kLoopExitBlob);
    nested_out.erase(kLoopBreakBlob);
  }
  out.insert(nested_out.begin(), nested_out.end());
}

// A branch layer on kLoopExitBlob whose elseBranch is layers [first, end) of `network`: the
// rest of a loop body after a layer that may end the iteration runs only when it did not.
nn::NeuralNetworkLayer rest_of_body(const nn::NeuralNetwork& network, int first, const std::string& after) {
  nn::BranchLayerParams params;
  params.mutable_ifbranch();
  for (int i = first; i < network.layers_size(); ++i) *params.mutable_elsebranch()->add_layers() = network.layers(i);
  nn::NeuralNetworkLayer frame;
  frame.set_name(after + "#rest");
  frame.add_input(kLoopExitBlob);
  std::string bytes = frame.SerializeAsString();
  const std::string member = params.SerializeAsString();
  google::protobuf::io::StringOutputStream sink(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&sink);
    out.WriteTag(WireFormatLite::MakeTag(605, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(member.size()));
    out.WriteString(member);
  }
  nn::NeuralNetworkLayer layer;
  require(layer.ParseFromString(bytes), "the rest of a loop body does not serialize");
  return layer;
}

std::set<std::string> written_by(const nn::NeuralNetworkLayer& layer) {
  std::set<std::string> out;
  collect_written(layer, out);
  return out;
}

std::string kind_name(int field) { return field ? network_layer_type_name(field) : "none"; }

[[noreturn]] void refuse_kind(int field) {
  refuse("this build cannot run neuralNetwork layers of type '", kind_name(field), "' (it runs ", runnable_kinds(), ")");
}

}  // namespace coremlrt::format::neural_network
