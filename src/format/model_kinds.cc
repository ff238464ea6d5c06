#include "format/model_kinds.h"

namespace coremlrt::format {

const std::vector<ModelKind>& model_kinds() {
  using F = ModelFamily;
  // Field numbers and names as proto/Model.proto declares them (docs/design/coreml-format.md,
  // "Protobuf schema"). Every classic predictor and feature-engineering kind is translated by
  // format/classic/ (bayesianProbitRegressor into a refusal that says why), pipelines by
  // format/pipeline_splicer.h, neuralNetworks by format/neural_network/.
  static const std::vector<ModelKind> kinds = {
      {200, "pipelineClassifier", F::Pipeline, true},
      {201, "pipelineRegressor", F::Pipeline, true},
      {202, "pipeline", F::Pipeline, true},
      {300, "glmRegressor", F::ClassicPredictor, true},
      {301, "supportVectorRegressor", F::ClassicPredictor, true},
      {302, "treeEnsembleRegressor", F::ClassicPredictor, true},
      {303, "neuralNetworkRegressor", F::NeuralNetwork, true},
      {304, "bayesianProbitRegressor", F::ClassicPredictor, false},
      {400, "glmClassifier", F::ClassicPredictor, true},
      {401, "supportVectorClassifier", F::ClassicPredictor, true},
      {402, "treeEnsembleClassifier", F::ClassicPredictor, true},
      {403, "neuralNetworkClassifier", F::NeuralNetwork, true},
      {404, "kNearestNeighborsClassifier", F::ClassicPredictor, true},
      {500, "neuralNetwork", F::NeuralNetwork, true},
      {501, "itemSimilarityRecommender", F::ClassicPredictor, true},
      {502, "mlProgram", F::MlProgram, true},
      {555, "customModel", F::Other, false},
      {556, "linkedModel", F::LinkedModel, false},
      {560, "classConfidenceThresholding", F::ClassicPredictor, true},
      {600, "oneHotEncoder", F::FeatureEngineering, true},
      {601, "imputer", F::FeatureEngineering, true},
      {602, "featureVectorizer", F::FeatureEngineering, true},
      {603, "dictVectorizer", F::FeatureEngineering, true},
      {604, "scaler", F::FeatureEngineering, true},
      {606, "categoricalMapping", F::FeatureEngineering, true},
      {607, "normalizer", F::FeatureEngineering, true},
      {609, "arrayFeatureExtractor", F::FeatureEngineering, true},
      {610, "nonMaximumSuppression", F::ClassicPredictor, true},
      {900, "identity", F::FeatureEngineering, true},
      {2000, "textClassifier", F::Other, false},
      {2001, "wordTagger", F::Other, false},
      {2002, "visionFeaturePrint", F::Other, false},
      {2003, "soundAnalysisPreprocessing", F::Other, false},
      {2004, "gazetteer", F::Other, false},
      {2005, "wordEmbedding", F::Other, false},
      {2006, "audioFeaturePrint", F::Other, false},
      {3000, "serializedModel", F::Other, false},
  };
  return kinds;
}

const ModelKind* find_model_kind(int field) {
  for (const ModelKind& kind : model_kinds())
    if (kind.field == field) return &kind;
  return nullptr;
}

const ModelKind* find_model_kind(const std::string& name) {
  for (const ModelKind& kind : model_kinds())
    if (name == kind.name) return &kind;
  return nullptr;
}

const char* model_type_name(int field) {
  if (field == 0) return "none";
  const ModelKind* kind = find_model_kind(field);
  return kind ? kind->name : "other";
}

bool is_model_family(const std::string& model_type, ModelFamily family) {
  const ModelKind* kind = find_model_kind(model_type);
  return kind && kind->family == family;
}

const char* model_family_name(const std::string& model_type) {
  const ModelKind* kind = find_model_kind(model_type);
  switch (kind ? kind->family : ModelFamily::Other) {
    case ModelFamily::MlProgram: return "mlProgram";
    case ModelFamily::NeuralNetwork: return "neuralNetwork";
    case ModelFamily::ClassicPredictor: return "classicPredictor";
    case ModelFamily::FeatureEngineering: return "featureEngineering";
    case ModelFamily::Pipeline: return "pipeline";
    case ModelFamily::LinkedModel: return "linkedModel";
    case ModelFamily::Other: return "other";
  }
  return "other";
}

bool runs_model_type(const std::string& model_type) {
  const ModelKind* kind = find_model_kind(model_type);
  return kind && kind->runs;
}

}  // namespace coremlrt::format
