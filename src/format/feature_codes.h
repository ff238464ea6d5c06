#pragma once
// What a function's features carry as numbers, because the engine's tensors hold no strings
// (include/coremlrt/model.h: Model::class_labels, input_vocabulary, output_vocabulary): the class
// labels of a classifier's `classify` op, and the vocabularies of its string and dictionary
// inputs and of its string outputs. They are constants of the ops that format/ writes
// (format/classic/, format/neural_network/, format/pipeline_splicer.h) or reads (ML programs),
// found here once per function, so that they travel with the loaded model.
#include <map>
#include <string>
#include <vector>

#include "coremlrt/description.h"
#include "ir/program.h"

namespace coremlrt::format {

struct FeatureCodes {
  // The labels of the function's classify op in class index order (int64 labels in decimal);
  // empty for a function that is no classifier.
  std::vector<std::string> class_labels;
  std::map<std::string, InputVocabulary> input_vocabularies;            // by input name
  std::map<std::string, std::vector<std::string>> output_vocabularies;  // by output name
  // Why the function's string features cannot be carried so, naming the function ("function
  // 'main': input 'text' is a string feature, which..."); empty when they can. Model::load
  // refuses such a function; readers that do not run it (inspect_model, the ONNX exporter) may
  // still read it.
  std::string problem;
};

// The codes of every function of `program` that `description` describes, by function name.
std::map<std::string, FeatureCodes> read_feature_codes(const ir::Program& program,
                                                       const ModelDescription& description);

}  // namespace coremlrt::format
