#include "format/pipeline_splicer.h"

#include <map>
#include <memory>
#include <optional>
#include <set>

#include "coremlrt/error.h"

namespace coremlrt::format {

namespace {

// A feature as the spliced function holds it.
struct FeatureValue {
  std::string value;
  ir::ValueType type;
  bool class_index = false;  // a classify op's label or dictionary: an index/vector, not the feature
};

bool same_tensor_type(const ir::ValueType& a, const ir::ValueType& b) {
  if (a.kind != ir::TypeKind::Tensor || b.kind != ir::TypeKind::Tensor) return a.kind == b.kind;
  if (a.dtype != b.dtype || a.rank != b.rank) return false;
  for (size_t i = 0; i < a.dims.size() && i < b.dims.size(); ++i)
    if (a.dims[i] >= 0 && b.dims[i] >= 0 && a.dims[i] != b.dims[i]) return false;
  return true;
}

int64_t static_numel(const ir::ValueType& type) {
  if (!type.is_static()) return -1;
  int64_t n = 1;
  for (int64_t d : type.dims) n *= d;
  return n;
}

const char* cast_name(DType dtype) {
  switch (dtype) {
    case DType::Float64: return "fp64";
    case DType::Float32: return "fp32";
    case DType::Float16: return "fp16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    default: return nullptr;
  }
}

// The program type of a double, int64 or multi-array feature as a description declares it
// (dims of a flexible shape are -1), as the classic readers type their inputs.
std::optional<ir::ValueType> declared_type(const FeatureDescription& feature) {
  ir::ValueType type;
  switch (feature.kind) {
    case FeatureKind::Double: type.dtype = DType::Float64; return type;
    case FeatureKind::Int64: type.dtype = DType::Int64; return type;
    case FeatureKind::MultiArray: {
      type.dtype = feature.dtype;
      type.dims.assign(feature.shape.begin(), feature.shape.end());
      for (size_t i = 0; i < type.dims.size(); ++i) {
        if (i < feature.shape_range.size() && feature.shape_range[i].first != feature.shape_range[i].second)
          type.dims[i] = -1;
        for (const Shape& shape : feature.enumerated_shapes)
          if (shape.size() != type.dims.size() || shape[i] != feature.shape[i]) type.dims[i] = -1;
      }
      if (type.dims.empty()) return std::nullopt;  // no declared shape: the reader's own type
      type.rank = static_cast<int64_t>(type.dims.size());
      return type;
    }
    default: return std::nullopt;
  }
}

class Splicer {
 public:
  Splicer(const FunctionDescription& description, std::string model_type, const std::string& opset)
      : description_(description), model_type_(std::move(model_type)) {
    function_.name = "main";
    function_.opset = opset;
    function_.ios_version = ir::ios_version_of_opset(function_.opset);
    for (const auto& f : description.inputs) used_.insert(f.name);
    for (const auto& f : description.outputs) used_.insert(f.name);
  }

  void add_stage(PipelineStage& stage, size_t index) {
    COREMLRT_CHECK(stage.program.functions.size() == 1, model_type_, ", ", stage.label, ": has ",
                   stage.program.functions.size(), " functions; a stage has one");
    ir::Function& f = stage.program.functions.begin()->second;
    prefix_ = "stage" + std::to_string(index) + "_";
    std::map<std::string, std::string> renamed;
    for (const ir::NamedValue& input : f.inputs) renamed[input.name] = bind_input(input, stage.label);
    const std::vector<std::string> own_outputs = f.block.outputs;
    rename_block(f.block, renamed);
    for (ir::Operation& op : f.block.operations) function_.block.operations.push_back(std::move(op));
    COREMLRT_CHECK(f.block.outputs.size() == stage.description.outputs.size(), model_type_, ", ", stage.label,
                   ": its program has ", f.block.outputs.size(), " outputs for ", stage.description.outputs.size(),
                   " described");
    for (size_t i = 0; i < f.block.outputs.size(); ++i) {
      // An output whose program name is the feature's own (ML programs) is matched by name,
      // any other by place (the translators emit them in description order).
      const std::string& feature = stage.description.outputs[i].name;
      size_t at = i;
      for (size_t j = 0; j < own_outputs.size(); ++j)
        if (own_outputs[j] == feature) at = j;
      const std::string& value = f.block.outputs[at];  // renamed by rename_block
      features_[feature] = {value, types_.at(value), class_index_.count(value) > 0};
    }
  }

  ir::Program finish() {
    std::set<std::string> returned;
    for (const FeatureDescription& output : description_.outputs) {
      auto it = features_.find(output.name);
      COREMLRT_CHECK(it != features_.end(), model_type_, ": output '", output.name, "' is produced by no stage");
      const FeatureValue& feature = it->second;
      // A dictionary leaves as a classifier's class probabilities, or as numbers over the
      // output vocabulary of the op that makes it (an itemSimilarityRecommender's scores).
      if (output.kind == FeatureKind::Dictionary)
        COREMLRT_CHECK(feature.class_index || has_output_vocabulary(feature.value), model_type_, ": output '",
                       output.name, "' is a dictionary; this build returns dictionaries only as a classifier's class "
                       "probabilities or a recommender's item scores");
      bool is_input = false;
      for (const auto& in : function_.inputs) is_input = is_input || in.name == feature.value;
      if (is_input || returned.count(feature.value)) {
        // A pipeline input passed through, or one value under two names: a copy under this name.
        ir::Operation op;
        op.type = "identity";
        op.name = "identity";
        op.inputs["x"] = {ir::Binding{feature.value, nullptr}};
        op.outputs.push_back({output.name, feature.type});
        function_.block.operations.push_back(std::move(op));
      } else if (feature.value != output.name) {
        rename_everywhere(function_.block, feature.value, output.name);
      }
      returned.insert(output.name);
      function_.block.outputs.push_back(output.name);
    }
    int classifiers = 0;
    for (const ir::Operation& op : function_.block.operations) classifiers += op.type == "classify";
    COREMLRT_CHECK(classifiers <= 1, model_type_, ": has ", classifiers, " classifier stages; this build runs "
                   "pipelines with at most one (its label and probabilities are the pipeline's)");
    ir::Program out;
    out.functions.emplace(function_.name, std::move(function_));
    return out;
  }

 private:
  // `value` is made by an op that carries its outputs over an `output_vocabulary` constant.
  bool has_output_vocabulary(const std::string& value) const {
    for (const ir::Operation& op : function_.block.operations) {
      if (!op.inputs.count("output_vocabulary")) continue;
      for (const ir::NamedValue& output : op.outputs)
        if (output.name == value) return true;
    }
    return false;
  }

  std::string unique(const std::string& stem) {
    std::string name = prefix_ + stem;
    for (int i = 1; used_.count(name); ++i) name = prefix_ + stem + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  // The value a stage's input reads: the feature of that name, converted to the stage's type
  // (dtype by cast, static shape by reshape) when the producer made it otherwise.
  std::string bind_input(const ir::NamedValue& input, const std::string& stage) {
    auto it = features_.find(input.name);
    if (it == features_.end()) {
      const FeatureDescription* declared = nullptr;
      for (const auto& f : description_.inputs)
        if (f.name == input.name) declared = &f;
      COREMLRT_CHECK(declared, model_type_, ", ", stage, ": reads '", input.name,
                     "', which is neither an input of the pipeline nor an output of an earlier stage");
      // A string, dictionary or sequence input takes the numeric form its reading stage
      // declares (a code, a dense vector or a vector of codes over that stage's vocabulary;
      // format/classic/text_feature_readers.cc, recommender_reader.cc); Model::input_vocabulary
      // fails the load unless exactly one op with a vocabulary reads it.
      COREMLRT_CHECK((declared->kind != FeatureKind::String && declared->kind != FeatureKind::Dictionary &&
                      declared->kind != FeatureKind::Sequence) ||
                         input.type.kind == ir::TypeKind::Tensor,
                     model_type_, ": input '", input.name, "' is a ", feature_kind_name(declared->kind),
                     " feature that ", stage, " cannot take");
      // A number or multi-array input takes the type the pipeline declares (a stage expecting
      // another gets a cast or reshape below); any other (an image) the type its first reader expects.
      const ir::ValueType type = declared_type(*declared).value_or(input.type);
      function_.inputs.push_back({input.name, type});
      types_[input.name] = type;
      it = features_.emplace(input.name, FeatureValue{input.name, type, false}).first;
    }
    const FeatureValue& feature = it->second;
    COREMLRT_CHECK(!feature.class_index, model_type_, ", ", stage, ": reads '", input.name,
                   "', a classifier stage's output; this build runs a classifier only as the last stage");
    if (same_tensor_type(feature.type, input.type)) return feature.value;
    COREMLRT_CHECK(feature.type.kind == ir::TypeKind::Tensor && input.type.kind == ir::TypeKind::Tensor, model_type_,
                   ", ", stage, ": reads '", input.name, "' as ", input.type.str(), " but it is ", feature.type.str());
    std::string value = feature.value;
    ir::ValueType type = feature.type;
    if (type.dtype != input.type.dtype) {
      const char* to = cast_name(input.type.dtype);
      COREMLRT_CHECK(to && cast_name(type.dtype), model_type_, ", ", stage, ": reads '", input.name, "' as ",
                     input.type.str(), " but it is ", feature.type.str());
      type.dtype = input.type.dtype;
      value = add_op("cast", value, {{"dtype", string_constant(to)}}, type, input.name + "_cast");
    }
    if (!same_tensor_type(type, input.type)) {
      const int64_t n = static_numel(type);
      COREMLRT_CHECK(n >= 0 && n == static_numel(input.type), model_type_, ", ", stage, ": reads '", input.name,
                     "' as ", input.type.str(), " but it is ", feature.type.str());
      auto shape = std::make_shared<ir::ConstValue>();
      const auto rank = static_cast<int64_t>(input.type.dims.size());
      shape->type.dtype = DType::Int32;
      shape->type.rank = 1;
      shape->type.dims = {rank};
      shape->tensor = Tensor::empty(DType::Int32, {rank});
      for (int64_t i = 0; i < rank; ++i) shape->tensor.ptr<int32_t>()[i] = static_cast<int32_t>(input.type.dims[i]);
      value = add_op("reshape", value, {{"shape", shape}}, input.type, input.name + "_reshaped");
    }
    return value;
  }

  static std::shared_ptr<ir::ConstValue> string_constant(const std::string& text) {
    auto out = std::make_shared<ir::ConstValue>();
    out->type.dtype = DType::String;
    out->tensor = Tensor::empty(DType::String, {});
    out->strings = {text};
    return out;
  }

  std::string add_op(const std::string& type, const std::string& x,
                     const std::vector<std::pair<std::string, std::shared_ptr<ir::ConstValue>>>& constants,
                     const ir::ValueType& output, const std::string& stem) {
    ir::Operation op;
    op.type = type;
    op.name = type;
    op.inputs["x"] = {ir::Binding{x, nullptr}};
    for (const auto& [param, value] : constants) op.inputs[param] = {ir::Binding{"", value}};
    std::string name = unique(stem);
    op.outputs.push_back({name, output});
    types_[name] = output;
    function_.block.operations.push_back(std::move(op));
    return name;
  }

  // Gives every value the block defines a unique name and points every use at it; `renamed`
  // holds the names visible from outside (the stage's inputs, then enclosing blocks' values).
  void rename_block(ir::Block& block, std::map<std::string, std::string>& renamed) {
    for (ir::NamedValue& input : block.inputs) input.name = renamed[input.name] = unique(input.name);
    for (ir::Operation& op : block.operations) {
      for (auto& [param, bindings] : op.inputs)
        for (ir::Binding& binding : bindings)
          if (!binding.value) {
            auto it = renamed.find(binding.name);
            COREMLRT_CHECK(it != renamed.end(), model_type_, ": ", op.describe(), " reads '", binding.name,
                           "', which its stage does not define");
            binding.name = it->second;
          }
      for (ir::Block& nested : op.blocks) {
        std::map<std::string, std::string> inner = renamed;
        rename_block(nested, inner);
      }
      for (ir::NamedValue& output : op.outputs) {
        output.name = renamed[output.name] = unique(output.name);
        types_[output.name] = output.type;
        if (op.type == "classify") class_index_.insert(output.name);
      }
    }
    for (std::string& output : block.outputs) {
      auto it = renamed.find(output);
      COREMLRT_CHECK(it != renamed.end(), model_type_, ": a stage's output '", output, "' is not defined");
      output = it->second;
    }
  }

  static void rename_everywhere(ir::Block& block, const std::string& from, const std::string& to) {
    for (ir::Operation& op : block.operations) {
      for (auto& [param, bindings] : op.inputs)
        for (ir::Binding& binding : bindings)
          if (!binding.value && binding.name == from) binding.name = to;
      for (ir::Block& nested : op.blocks) rename_everywhere(nested, from, to);
      for (ir::NamedValue& output : op.outputs)
        if (output.name == from) output.name = to;
    }
    for (std::string& output : block.outputs)
      if (output == from) output = to;
  }

  const FunctionDescription& description_;
  std::string model_type_;
  ir::Function function_;
  std::string prefix_;
  std::set<std::string> used_;
  std::map<std::string, FeatureValue> features_;
  std::map<std::string, ir::ValueType> types_;
  std::set<std::string> class_index_;
};

}  // namespace

ir::Program splice_pipeline(std::vector<PipelineStage> stages, const FunctionDescription& description,
                            const std::string& model_type) {
  COREMLRT_CHECK(!stages.empty(), model_type, " has no stages");
  std::string opset = "CoreML5";
  const PipelineStage* fixed = nullptr;
  for (const PipelineStage& stage : stages) {
    if (!stage.fixed_opset || stage.program.functions.empty()) continue;
    const std::string& own = stage.program.functions.begin()->second.opset;
    COREMLRT_CHECK(!fixed || own == opset, model_type, ": ", fixed->label, " and ", stage.label,
                   " are ML programs of different opsets (", opset, ", ", own, "); this build runs a pipeline under one");
    fixed = &stage;
    opset = own;
  }
  Splicer splicer(description, model_type, opset);
  for (size_t i = 0; i < stages.size(); ++i) splicer.add_stage(stages[i], i);
  return splicer.finish();
}

}  // namespace coremlrt::format
