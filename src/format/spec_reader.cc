#include "format/spec_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "Model.pb.h"
#include "coremlrt/error.h"
#include "coremlrt/limits.h"
#include "format/blob_file.h"
#include "classic_pipeline.pb.h"
#include "format/classic/predictor.h"
#include "format/compiled_model.h"
#include "format/description_reader.h"
#include "format/memory_model.h"
#include "format/model_kinds.h"
#include "format/pipeline_message.h"
#include "format/pipeline_splicer.h"
#include "format/value_reader.h"

namespace coremlrt::format {

namespace spec = CoreML::Specification;
namespace mil = CoreML::Specification::MILSpec;

namespace {

// The model's kind in format/model_kinds.h; nullptr for a Type field this schema does not know.
const ModelKind* kind_of(const spec::Model& model) { return find_model_kind(static_cast<int>(model.Type_case())); }
const char* type_name_of(const spec::Model& model) { return model_type_name(static_cast<int>(model.Type_case())); }

ir::Block read_block(const mil::Block& block, ValueReader& values, int depth);

// `depth`: how many blocks enclose the op (0 for a function's own ops).
ir::Operation read_operation(const mil::Operation& op, ValueReader& values, int depth) {
  ir::Operation out;
  out.type = op.type();
  // Errors in attributes name the op by its name when it has one (the name is an attribute too).
  std::string label = "op of type " + op.type();
  if (auto name = op.attributes().find("name"); name != op.attributes().end() &&
                                                 name->second.immediatevalue().tensor().strings().values_size() == 1)
    label = "op '" + name->second.immediatevalue().tensor().strings().values(0) + "' (" + op.type() + ")";
  for (const auto& [key, value] : op.attributes()) {
    auto constant = std::make_shared<ir::ConstValue>(values.read(value, label + ", attribute '" + key + "'"));
    if (key == "name" && !constant->strings.empty()) out.name = constant->strings[0];
    out.attributes[key] = std::move(constant);
  }
  for (const auto& output : op.outputs()) out.outputs.push_back({output.name(), read_value_type(output.type())});
  const std::string where = out.describe();
  for (const auto& [param, argument] : op.inputs()) {
    std::vector<ir::Binding>& bindings = out.inputs[param];
    for (const auto& binding : argument.arguments()) {
      ir::Binding b;
      if (binding.binding_case() == mil::Argument::Binding::kName) {
        b.name = binding.name();
      } else if (binding.binding_case() == mil::Argument::Binding::kValue) {
        b.value = std::make_shared<ir::ConstValue>(values.read(binding.value(), where + " input '" + param + "'"));
      } else {
        fail(where, ": input '", param, "' has an empty binding");
      }
      bindings.push_back(std::move(b));
    }
  }
  if (op.blocks_size() > 0)
    COREMLRT_CHECK(depth < kMaxBlockNesting, where, ": blocks nested more than ", kMaxBlockNesting,
                   " deep (the nesting limit; coremlrt/limits.h)");
  for (const auto& block : op.blocks()) out.blocks.push_back(read_block(block, values, depth + 1));
  return out;
}

ir::Block read_block(const mil::Block& block, ValueReader& values, int depth) {
  ir::Block out;
  for (const auto& input : block.inputs()) out.inputs.push_back({input.name(), read_value_type(input.type())});
  out.outputs.assign(block.outputs().begin(), block.outputs().end());
  for (const auto& op : block.operations()) out.operations.push_back(read_operation(op, values, depth));
  return out;
}

ir::Program read_program(const mil::Program& program, ValueReader& values) {
  ir::Program out;
  COREMLRT_CHECK(program.version() == 1, "ML program has version ", program.version(), "; expected 1");
  for (const auto& [name, function] : program.functions()) {
    ir::Function f;
    f.name = name;
    f.opset = function.opset();
    f.ios_version = ir::ios_version_of_opset(f.opset);
    for (const auto& input : function.inputs()) f.inputs.push_back({input.name(), read_value_type(input.type())});
    auto block = function.block_specializations().find(function.opset());
    COREMLRT_CHECK(block != function.block_specializations().end(), "function '", name,
                   "' has no block for its opset '", function.opset(), "'");
    f.block = read_block(block->second, values, 0);
    out.functions.emplace(name, std::move(f));
  }
  COREMLRT_CHECK(!out.functions.empty(), "ML program has no functions");
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COREMLRT_CHECK(in.good(), "cannot read model file '", path, "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}


bool is_pipeline(const spec::Model& model) {
  const ModelKind* kind = kind_of(model);
  return kind && kind->family == ModelFamily::Pipeline;
}

// Model types format/classic/ translates: its classic predictors and feature-engineering models
// (the ones it refuses, bayesianProbitRegressor and feature kinds it cannot take, say why).
bool translated_type(const spec::Model& model) {
  const ModelKind* kind = kind_of(model);
  return kind && (kind->family == ModelFamily::ClassicPredictor || kind->family == ModelFamily::FeatureEngineering);
}

ir::Program translate_model(const spec::Model& model, const FunctionDescription& description,
                            const std::string& type, bool stage, ValueReader* values,
                            const std::string& location = "");

// A nonMaximumSuppression stage reads the threshold inputs its message names from the features
// of its pipeline, as Core ML passes a stage every feature by name, even when the stage's own
// description leaves them out (as detector exporters write it).
void add_threshold_inputs(const std::string& nms, const FunctionDescription& pipeline, FunctionDescription& stage) {
  for (const classic::RoleDefault& input : classic::non_maximum_suppression_defaults(nms)) {
    bool declared = false;
    for (const FeatureDescription& f : stage.inputs) declared = declared || f.name == input.name;
    if (declared) continue;
    for (const FeatureDescription& f : pipeline.inputs)
      if (f.name == input.name && f.kind == FeatureKind::Double) stage.inputs.push_back(f);
  }
}

// The inputs whose role in a classic model (at any depth of a pipeline) gives them a value when
// a caller leaves them out: a nonMaximumSuppression model's threshold inputs, an
// itemSimilarityRecommender's count, restriction and exclusion inputs (classic::RoleDefault).
void collect_role_defaults(const spec::Model& model, std::vector<classic::RoleDefault>& out, int depth) {
  std::vector<classic::RoleDefault> found;
  if (model.Type_case() == spec::Model::kNonMaximumSuppression)
    found = classic::non_maximum_suppression_defaults(model.nonmaximumsuppression());
  else if (model.Type_case() == spec::Model::kItemSimilarityRecommender)
    found = classic::item_similarity_defaults(model.itemsimilarityrecommender());
  out.insert(out.end(), found.begin(), found.end());
  if (!is_pipeline(model) || depth >= kMaxBlockNesting) return;
  spec::Pipeline pipeline;
  if (!parse_pipeline(model, pipeline)) return;  // translate_pipeline reports it
  for (const std::string& bytes : pipeline.models()) {
    spec::Model stage;
    if (stage.ParseFromString(bytes)) collect_role_defaults(stage, out, depth + 1);
  }
}

// Marks each model input that a role default covers optional, with that default, as Core ML
// treats it: `input_description`, `coremlrt info` and the server's metadata then say so, and
// Model::predict fills it in (runtime/default_input.h). A default the description declares
// itself (doubleDefaultValue) stays; the first stage naming an input decides.
void apply_role_defaults(const spec::Model& model, FunctionDescription& description) {
  std::vector<classic::RoleDefault> defaults;
  collect_role_defaults(model, defaults, 0);
  for (FeatureDescription& f : description.inputs) {
    for (const classic::RoleDefault& role : defaults) {
      if (role.name != f.name || role.kind != f.kind) continue;
      f.optional = true;
      if (!f.default_value) f.default_value = role.value;
      break;
    }
  }
}

LoadedModel read_model_at(const std::string& path);

// linkedModel (Model field 556): a pipeline stage that is another compiled model, named by its
// file name and found along a search path of folders (":" between them; empty: "."), each
// relative to `location`, the folder the pipeline lies in. Paths that leave that folder
// (absolute ones, "..", links pointing out) and app-bundle paths ($BUNDLE_MAIN, ...) are refused:
// a model names only models shipped beside it. Linked models may link others, at most
// kMaxLinkDepth deep (a cycle would never end).
constexpr int kMaxLinkDepth = 8;

LoadedModel read_linked_model(const std::string& serialized, const std::string& location) {
  spec::LinkedModel linked;
  COREMLRT_CHECK(linked.ParseFromString(serialized), "linkedModel: the message does not parse");
  COREMLRT_CHECK(linked.has_linkedmodelfile(), "linkedModel: the message names no model file");
  const std::string name = linked.linkedmodelfile().linkedmodelfilename().defaultvalue();
  const std::string search = linked.linkedmodelfile().linkedmodelsearchpath().defaultvalue();
  COREMLRT_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                 "linkedModel: the model file name '", name, "' is not the name of a file");
  COREMLRT_CHECK(!location.empty(), "linkedModel: '", name, "': a model read from memory has no folder to look in");
  namespace fs = std::filesystem;
  const fs::path root = fs::weakly_canonical(fs::path(location));
  std::string tried;
  size_t begin = 0;
  for (;;) {
    const size_t end = search.find(':', begin);
    std::string folder = search.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (folder.empty()) folder = ".";
    COREMLRT_CHECK(folder[0] != '$', "linkedModel: '", name, "': search path entry '", folder,
                   "' names an app bundle, which does not exist outside Apple platforms");
    const fs::path relative(folder);
    bool climbs = relative.is_absolute();
    for (const fs::path& part : relative) climbs = climbs || part == "..";
    COREMLRT_CHECK(!climbs, "linkedModel: '", name, "': search path entry '", folder,
                   "' leaves the folder of the model that links it");
    const fs::path candidate = root / relative / name;
    std::error_code ec;
    if (fs::exists(candidate, ec)) {
      const fs::path real = fs::weakly_canonical(candidate);
      const auto [inside, rest] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
      COREMLRT_CHECK(inside == root.end(), "linkedModel: '", candidate.string(), "' leads out of the folder of the ",
                     "model that links it (to '", real.string(), "')");
      static thread_local int depth = 0;
      COREMLRT_CHECK(depth < kMaxLinkDepth, "linkedModel: '", candidate.string(), "': linked models link each other ",
                     "more than ", kMaxLinkDepth, " deep (a cycle?)");
      ++depth;
      struct Leave {
        ~Leave() { --depth; }
      } leave;
      LoadedModel out = read_model_at(candidate.string());
      const std::string problem = !out.problem.empty() ? out.problem : out.network.problem;
      COREMLRT_CHECK(problem.empty() && !out.program.functions.empty(), "linkedModel: '", candidate.string(),
                     "' cannot run: ", problem.empty() ? "no program this build runs" : problem);
      if (out.program.functions.size() > 1) {  // a multifunction ML program: its default function
        const std::string keep = out.description.default_function;
        for (auto it = out.program.functions.begin(); it != out.program.functions.end();)
          it = it->first == keep ? std::next(it) : out.program.functions.erase(it);
        const FunctionDescription* chosen = out.description.find_function(keep);
        COREMLRT_CHECK(out.program.functions.size() == 1 && chosen, "linkedModel: '", candidate.string(),
                       "' has no default function");
        out.description.functions = {*chosen};
      }
      return out;
    }
    tried += (tried.empty() ? "" : ", ") + candidate.string();
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  fail("linkedModel: no '", name, "' in the search path (looked for ", tried, ")");
}

// The description the splicer joins a linked stage by: the linked model's own, which its program
// implements, after checking that it has every feature the pipeline's stage declares.
FunctionDescription linked_stage_description(const LoadedModel& linked, const FunctionDescription& declared) {
  const FunctionDescription& own = linked.description.functions.front();
  for (const auto* list : {&declared.inputs, &declared.outputs}) {
    const auto& theirs = list == &declared.inputs ? own.inputs : own.outputs;
    for (const FeatureDescription& f : *list) {
      bool found = false;
      for (const FeatureDescription& g : theirs) found = found || g.name == f.name;
      COREMLRT_CHECK(found, "linkedModel: the linked model has no ", list == &declared.inputs ? "input" : "output",
                     " '", f.name, "', which the pipeline's stage declares");
    }
  }
  return own;
}

// A pipeline's stages, each translated on its own, spliced into one function
// (format/pipeline_splicer.h).
ir::Program translate_pipeline(const spec::Model& model, const FunctionDescription& description,
                               const std::string& type, int depth, ValueReader* values, const std::string& location) {
  spec::Pipeline pipeline;
  COREMLRT_CHECK(parse_pipeline(model, pipeline), type, ": the message does not parse");
  COREMLRT_CHECK(depth < kMaxBlockNesting, type, ": pipelines nested more than ", kMaxBlockNesting,
                 " deep (the nesting limit; coremlrt/limits.h)");
  std::vector<PipelineStage> stages;
  for (int i = 0; i < pipeline.models_size(); ++i) {
    spec::Model stage_model;
    PipelineStage stage;
    const std::string name = i < pipeline.names_size() ? pipeline.names(i) : "model" + std::to_string(i);
    COREMLRT_CHECK(stage_model.ParseFromString(pipeline.models(i)), type, ": stage ", i, " '", name,
                   "' does not parse");
    const ModelDescription stage_description = read_description(stage_model);
    stage.label = "stage " + std::to_string(i) + " '" + name + "' (" + stage_description.model_type + ")";
    COREMLRT_CHECK(stage_description.functions.size() == 1, type, ", ", stage.label, ": has ",
                   stage_description.functions.size(), " functions; a stage has one");
    stage.description = stage_description.functions.front();
    try {
      if (stage_model.Type_case() == spec::Model::kNonMaximumSuppression)
        add_threshold_inputs(stage_model.nonmaximumsuppression(), description, stage.description);
      if (stage_model.Type_case() == spec::Model::kLinkedModel) {
        LoadedModel linked = read_linked_model(stage_model.linkedmodel(), location);
        stage.description = linked_stage_description(linked, stage.description);
        stage.program = std::move(linked.program);
      } else if (is_pipeline(stage_model)) {
        stage.program = translate_pipeline(stage_model, stage.description, stage_description.model_type, depth + 1,
                                           values, location);
      } else {
        stage.program = translate_model(stage_model, stage.description, stage_description.model_type, true, values);
      }
      // An ML program's ops mean what its opset says; every other stage's translated ops mean
      // the same in every opset (format/classic/predictor.h, format/neural_network/reader.h).
      stage.fixed_opset = stage_model.Type_case() == spec::Model::kMlProgram;
      if (is_pipeline(stage_model) || stage_model.Type_case() == spec::Model::kLinkedModel)
        stage.fixed_opset = stage.program.functions.begin()->second.opset != "CoreML5";
    } catch (const Error& e) {
      fail_like(e, type, ", ", stage.label, ": ", e.what());
    }
    stages.push_back(std::move(stage));
  }
  return splice_pipeline(std::move(stages), description, type);
}

// `stage`: the model is a stage of a pipeline, whose features may be dictionaries carried
// densely between stages (ops/feature_engineering.cc); a model on its own takes and returns
// none (a classifier's probabilities aside).
// `values` reads an ML program stage's constants and weight files.
ir::Program translate_model(const spec::Model& model, const FunctionDescription& description,
                            const std::string& type, bool stage, ValueReader* values, const std::string& location) {
  if (is_pipeline(model)) return translate_pipeline(model, description, type, 0, values, location);
  const FunctionDescription& d = description;
  // dictVectorizer, categoricalMapping, oneHotEncoder and itemSimilarityRecommender check their
  // own inputs: a string, dictionary or sequence reaches them as numbers over their vocabulary
  // (format/classic/text_feature_readers.cc, recommender_reader.cc).
  const bool reads_text = model.Type_case() == spec::Model::kDictVectorizer ||
                          model.Type_case() == spec::Model::kCategoricalMapping ||
                          model.Type_case() == spec::Model::kOneHotEncoder ||
                          model.Type_case() == spec::Model::kItemSimilarityRecommender;
  if (!stage && !reads_text && model.Type_case() != spec::Model::kNeuralNetwork) {
    for (const FeatureDescription& f : d.inputs)
      COREMLRT_CHECK(f.kind != FeatureKind::String && f.kind != FeatureKind::Dictionary &&
                         f.kind != FeatureKind::Sequence,
                     type, ": input '", f.name, "' is a ", feature_kind_name(f.kind),
                     " feature; this build takes no string, dictionary or sequence inputs");
  }
  ir::Program out;
  switch (model.Type_case()) {
    case spec::Model::kNeuralNetwork:
    case spec::Model::kNeuralNetworkClassifier:
    case spec::Model::kNeuralNetworkRegressor: {
      NeuralNetworkReading network =
          model.Type_case() == spec::Model::kNeuralNetwork
              ? read_neural_network(model.neuralnetwork(), d)
              : model.Type_case() == spec::Model::kNeuralNetworkClassifier
                    ? read_neural_network(model.neuralnetworkclassifier(), d, NetworkRole::Classifier)
                    : read_neural_network(model.neuralnetworkregressor(), d, NetworkRole::Regressor);
      COREMLRT_CHECK(network.problem.empty(), network.problem);
      for (const NetworkLayer& layer : network.layers)
        COREMLRT_CHECK(layer.problem.empty(), "neuralNetwork layer '", layer.name, "' (", layer.type, "): ",
                       layer.problem);
      return std::move(network.program);
    }
    case spec::Model::kMlProgram: {
      // Only as a stage: a model of its own is read by read_model. Its weights are the
      // package's (coremltools writes each stage's to weights/<i>-weight.bin).
      COREMLRT_CHECK(values, "an ML program stage needs the package it came in");
      ir::Program program = read_program(model.mlprogram(), *values);
      COREMLRT_CHECK(program.functions.size() == 1, "an ML program stage has one function; this one has ",
                     program.functions.size());
      return program;
    }
    case spec::Model::kGlmRegressor: return classic::read_glm_regressor(model.glmregressor(), d);
    case spec::Model::kGlmClassifier: return classic::read_glm_classifier(model.glmclassifier(), d);
    case spec::Model::kSupportVectorRegressor: return classic::read_svm_regressor(model.supportvectorregressor(), d);
    case spec::Model::kSupportVectorClassifier: return classic::read_svm_classifier(model.supportvectorclassifier(), d);
    case spec::Model::kTreeEnsembleRegressor:
      return classic::read_tree_ensemble_regressor(model.treeensembleregressor(), d);
    case spec::Model::kTreeEnsembleClassifier:
      return classic::read_tree_ensemble_classifier(model.treeensembleclassifier(), d);
    case spec::Model::kKNearestNeighborsClassifier:
      return classic::read_knn_classifier(model.knearestneighborsclassifier(), d);
    case spec::Model::kScaler: out = classic::read_scaler(model.scaler(), d); break;
    case spec::Model::kImputer: out = classic::read_imputer(model.imputer(), d); break;
    case spec::Model::kNormalizer: out = classic::read_normalizer(model.normalizer(), d); break;
    case spec::Model::kFeatureVectorizer: out = classic::read_feature_vectorizer(model.featurevectorizer(), d); break;
    case spec::Model::kArrayFeatureExtractor:
      out = classic::read_array_feature_extractor(model.arrayfeatureextractor(), d);
      break;
    case spec::Model::kOneHotEncoder: out = classic::read_one_hot_encoder(model.onehotencoder(), d); break;
    case spec::Model::kIdentity: out = classic::read_identity(d); break;
    case spec::Model::kDictVectorizer: out = classic::read_dict_vectorizer(model.dictvectorizer(), d); break;
    case spec::Model::kCategoricalMapping: out = classic::read_categorical_mapping(model.categoricalmapping(), d); break;
    case spec::Model::kNonMaximumSuppression:
      out = classic::read_non_maximum_suppression(model.nonmaximumsuppression(), d);
      break;
    case spec::Model::kClassConfidenceThresholding:
      out = classic::read_class_confidence_thresholding(model.classconfidencethresholding(), d);
      break;
    case spec::Model::kItemSimilarityRecommender:
      out = classic::read_item_similarity_recommender(model.itemsimilarityrecommender(), d);
      break;
    case spec::Model::kBayesianProbitRegressor:
      // The format defines the probability as Φ(<w, x> / β) but gives β nowhere in the message,
      // and its sampled probability is drawn by a generator it does not name.
      fail_as(ErrorKind::Unsupported, "model type 'bayesianProbitRegressor' is refused: its probability divides by a scale β that the "
           "format leaves out of the model, so no result could be Core ML's");
    default: fail_as(ErrorKind::Unsupported, "model type '", type, "' is not supported by this build");
  }
  if (!stage) {
    // A recommender's item scores leave as numbers over its output vocabulary (recommender_reader.cc).
    for (const FeatureDescription& f : d.outputs)
      COREMLRT_CHECK(f.kind != FeatureKind::Dictionary || model.Type_case() == spec::Model::kItemSimilarityRecommender,
                     type, ": output '", f.name, "' is a dictionary; this build "
                     "returns dictionaries only as a classifier's class probabilities (inside a pipeline such a "
                     "stage may feed a featureVectorizer)");
    const ir::Function& f = out.functions.begin()->second;
    for (size_t i = 0; i < f.block.outputs.size() && i < d.outputs.size(); ++i)
      COREMLRT_CHECK(f.block.outputs[i] == d.outputs[i].name || type == "identity", type, ": output '",
                     d.outputs[i].name, "' has the name of an input; such a model runs only as a pipeline stage");
  }
  return out;
}

// The Model message of `files`, checked as every reader needs it.
spec::Model parse_model(const ModelFiles& files, const MemoryModel* memory) {
  std::string bytes = memory ? memory->spec : read_file(files.model_file);
  spec::Model model;
  COREMLRT_CHECK(!bytes.empty(), "model file '", files.model_file, "' is empty");
  // Parsing also refuses proto3 string fields (map keys and values included) that are not valid
  // UTF-8, so every name and metadata text below is text a caller can decode.
  COREMLRT_CHECK(model.ParseFromString(bytes), "model file '", files.model_file,
                 "' is not a valid Core ML model (the protobuf does not parse; truncated, not a model, or a "
                 "text field that is not valid UTF-8)");
  COREMLRT_CHECK(model.specificationversion() > 0, "model file '", files.model_file,
                 "' has no specification version (field missing or corrupt)");
  COREMLRT_CHECK(model.specificationversion() <= kMaxSpecificationVersion, "model file '", files.model_file,
                 "' has specification version ", model.specificationversion(), "; this build reads up to ",
                 kMaxSpecificationVersion);
  return model;
}

// The program of an ML program, or the layers (and program) of a neuralNetwork model; false
// for any other type.
bool read_network_or_program(const spec::Model& model, ValueReader& values, LoadedModel& out) {
  if (model.Type_case() == spec::Model::kMlProgram) {
    out.program = read_program(model.mlprogram(), values);
    out.weight_bytes = values.weight_bytes();
  } else if (model.Type_case() == spec::Model::kNeuralNetwork) {
    out.weight_bytes = model.neuralnetwork().size();  // weights are stored in the message itself; count all of it
    out.network = read_neural_network(model.neuralnetwork(), out.description.functions.front());
    out.program = std::move(out.network.program);
  } else if (model.Type_case() == spec::Model::kNeuralNetworkClassifier) {
    out.weight_bytes = model.neuralnetworkclassifier().size();
    out.network = read_neural_network(model.neuralnetworkclassifier(), out.description.functions.front(),
                                      NetworkRole::Classifier);
    out.program = std::move(out.network.program);
  } else if (model.Type_case() == spec::Model::kNeuralNetworkRegressor) {
    out.weight_bytes = model.neuralnetworkregressor().size();
    out.network = read_neural_network(model.neuralnetworkregressor(), out.description.functions.front(),
                                      NetworkRole::Regressor);
    out.program = std::move(out.network.program);
  } else {
    return false;
  }
  return true;
}

std::vector<PipelineStageModel> stages_of(const spec::Model& model, const ModelFiles& files, ValueReader& values,
                                          int depth) {
  spec::Pipeline pipeline;
  COREMLRT_CHECK(parse_pipeline(model, pipeline), "pipeline: the message does not parse");
  COREMLRT_CHECK(depth < kMaxBlockNesting, "pipelines nested more than ", kMaxBlockNesting,
                 " deep (the nesting limit; coremlrt/limits.h)");
  std::vector<PipelineStageModel> out;
  for (int i = 0; i < pipeline.models_size(); ++i) {
    PipelineStageModel stage;
    stage.name = i < pipeline.names_size() ? pipeline.names(i) : "model" + std::to_string(i);
    spec::Model stage_model;
    COREMLRT_CHECK(stage_model.ParseFromString(pipeline.models(i)), "pipeline: stage ", i, " '", stage.name,
                   "' does not parse");
    stage.model.files = files;
    stage.model.description = read_description(stage_model);
    if (is_pipeline(stage_model)) stage.stages = stages_of(stage_model, files, values, depth + 1);
    else read_network_or_program(stage_model, values, stage.model);
    out.push_back(std::move(stage));
  }
  return out;
}

}  // namespace

std::vector<PipelineStageModel> read_pipeline_stages(const ModelFiles& files) {
  // A compiled folder that coremlrt wrote keeps the source model (compiled_model.h); one
  // compiled by Apple's compiler holds binary files this build does not read.
  COREMLRT_CHECK(!files.compiled || std::filesystem::path(files.model_file).filename() == kCompiledSourceFile, "'",
                 files.model_dir, "': the stages of a pipeline compiled by Apple's compiler are not read here");
  std::shared_ptr<const MemoryModel> memory = files.in_memory ? find_memory_model(files.model_file) : nullptr;
  const spec::Model model = parse_model(files, memory.get());
  COREMLRT_CHECK(is_pipeline(model), "model file '", files.model_file, "' is a ", type_name_of(model),
                 " model, not a pipeline");
  ValueReader values(files.model_dir);
  if (memory) values.use_memory_blobs(memory->blobs);
  return stages_of(model, files, values, 0);
}

namespace {

// A .mlmodel or .mlpackage, from its Model message.
LoadedModel read_source_model(const ModelFiles& files) {
  LoadedModel out;
  out.files = files;
  std::shared_ptr<const MemoryModel> memory = files.in_memory ? find_memory_model(files.model_file) : nullptr;
  const spec::Model model = parse_model(files, memory.get());
  out.description = read_description(model);
  ValueReader values(files.model_dir);
  if (memory) values.use_memory_blobs(memory->blobs);
  if (read_network_or_program(model, values, out)) return out;
  if (is_pipeline(model) || translated_type(model)) {
    try {
      out.program = translate_model(model, out.description.functions.front(), out.description.model_type, false,
                                    &values, files.location);
      out.weight_bytes = values.weight_bytes();
      apply_role_defaults(model, out.description.functions.front());
    } catch (const Error& e) {
      out.problem = e.what();  // refused when the model is loaded, reported by `coremlrt info`
    }
  }
  return out;
}

}  // namespace

LoadedModel read_model(const ModelFiles& files) {
  LoadedModel out = files.compiled ? read_compiled_model(files) : read_source_model(files);
  out.feature_codes = read_feature_codes(out.program, out.description);
  return out;
}

namespace {

LoadedModel read_model_at(const std::string& path) { return read_model(locate_model(path)); }

}  // namespace

}  // namespace coremlrt::format
