#pragma once
// Every kind of Core ML model (the Model message's `Type` field, proto/Model.proto), with its
// family and whether this build runs it: the one list that the reader (spec_reader.cc), the
// compiled-model reader, Model::load, `coremlrt info` and the structure reader consult, so that
// no other file spells out model type names.
#include <string>
#include <vector>

namespace coremlrt::format {

enum class ModelFamily {
  MlProgram,           // mlProgram
  NeuralNetwork,       // neuralNetwork and its classifier and regressor forms
  ClassicPredictor,    // GLMs, SVMs, tree ensembles, k-NN, non-maximum suppression, the item recommender, ...
  FeatureEngineering,  // scaler, imputer, one-hot encoder, vectorizers, ... and identity
  Pipeline,            // pipeline, pipelineClassifier, pipelineRegressor
  LinkedModel,         // another compiled model, as a pipeline's stage
  Other,               // kinds this build does not read: custom models, Create ML's
};

struct ModelKind {
  int field;  // the field number of the Model message's Type oneof
  const char* name;  // ModelDescription::model_type
  ModelFamily family;
  // Whether this build runs a model of this kind on its own (a linked model runs only as a
  // pipeline's stage; bayesianProbitRegressor is read and refused with its reason).
  bool runs;
};

// In field order.
const std::vector<ModelKind>& model_kinds();

// The kind with this field number or ModelDescription::model_type; nullptr for none.
const ModelKind* find_model_kind(int field);
const ModelKind* find_model_kind(const std::string& name);

// The model type name of a Type field number: "none" when the field is unset (0), "other" for a
// number this schema does not know.
const char* model_type_name(int field);

// Whether `model_type` (ModelDescription::model_type) is of `family`; false for unknown names.
bool is_model_family(const std::string& model_type, ModelFamily family);

// The name ModelDescription::model_family gives `model_type`'s family: "mlProgram",
// "neuralNetwork", "classicPredictor", "featureEngineering", "pipeline", "linkedModel", "other"
// (also for unknown names).
const char* model_family_name(const std::string& model_type);

// Whether this build runs models of type `model_type` (ModelKind::runs).
bool runs_model_type(const std::string& model_type);

}  // namespace coremlrt::format
