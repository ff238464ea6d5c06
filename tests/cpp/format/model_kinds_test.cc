#include "format/model_kinds.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace coremlrt::format {
namespace {

TEST(ModelKinds, EachFieldAndNameIsListedOnce) {
  std::set<int> fields;
  std::set<std::string> names;
  for (const ModelKind& kind : model_kinds()) {
    EXPECT_TRUE(fields.insert(kind.field).second) << kind.field;
    EXPECT_TRUE(names.insert(kind.name).second) << kind.name;
    EXPECT_EQ(find_model_kind(kind.field), &kind);
    EXPECT_EQ(find_model_kind(kind.name), &kind);
  }
}

TEST(ModelKinds, NamesFamiliesAndWhatRuns) {
  EXPECT_STREQ(model_type_name(502), "mlProgram");
  EXPECT_STREQ(model_type_name(0), "none");
  EXPECT_STREQ(model_type_name(12345), "other");
  EXPECT_TRUE(is_model_family("neuralNetworkClassifier", ModelFamily::NeuralNetwork));
  EXPECT_TRUE(is_model_family("pipelineRegressor", ModelFamily::Pipeline));
  EXPECT_FALSE(is_model_family("mlProgram", ModelFamily::Pipeline));
  EXPECT_FALSE(is_model_family("nonsense", ModelFamily::Other));
  EXPECT_STREQ(model_family_name("dictVectorizer"), "featureEngineering");
  EXPECT_STREQ(model_family_name("nonsense"), "other");
  for (const char* runs : {"mlProgram", "neuralNetwork", "glmClassifier", "scaler", "pipeline", "identity",
                           "nonMaximumSuppression", "classConfidenceThresholding", "itemSimilarityRecommender"})
    EXPECT_TRUE(runs_model_type(runs)) << runs;
  // Read and refused with its reason; only a pipeline's stage; not read at all; unknown.
  for (const char* refused : {"bayesianProbitRegressor", "linkedModel", "customModel", "other"})
    EXPECT_FALSE(runs_model_type(refused)) << refused;
}

}  // namespace
}  // namespace coremlrt::format
