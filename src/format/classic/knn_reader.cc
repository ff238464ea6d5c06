// kNearestNeighborsClassifier (Model field 404): labelled samples, a linear or kd-tree index
// (both find the same exact neighbours; the op searches linearly), squared Euclidean
// distance, uniform or inverse-distance weighting. Each sample's label becomes the position
// of that label among the model's distinct labels, in sorted order (numbers by value,
// strings bytewise), which is also the order of the probability dictionary and the order in
// which equal votes are broken, as scikit-learn breaks them (its classes_ are sorted).
// Computed by the `nearest_neighbors` op (src/ops/nearest_neighbors.cc).
#include <algorithm>
#include <map>

#include "classic_nearest_neighbors.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

ir::Program read_knn_classifier(const std::string& serialized, const FunctionDescription& description) {
  spec::KNearestNeighborsClassifier knn;
  COREMLRT_CHECK(knn.ParseFromString(serialized), "kNearestNeighborsClassifier: the message does not parse");
  PredictorProgram program(description, "kNearestNeighborsClassifier");
  const std::string& what = program.model_type();
  const spec::NearestNeighborsIndex& index = knn.nearestneighborsindex();
  COREMLRT_CHECK(index.DistanceFunction_case() == spec::NearestNeighborsIndex::kSquaredEuclideanDistance, what,
                 ": the index names no distance function (squared Euclidean is the only one)");
  COREMLRT_CHECK(index.IndexType_case() != spec::NearestNeighborsIndex::INDEXTYPE_NOT_SET, what,
                 ": the index is neither linear nor a kd-tree");
  const int64_t dims = index.numberofdimensions();
  COREMLRT_CHECK(dims > 0, what, ": numberOfDimensions is ", dims);
  COREMLRT_CHECK(program.feature_count() < 0 || program.feature_count() == dims, what, ": the index has ", dims,
                 " dimensions but the inputs hold ", program.feature_count(), " values");
  const auto samples = static_cast<int64_t>(index.floatsamples_size());
  COREMLRT_CHECK(samples * dims <= (int64_t{1} << 28), what, ": too many samples (", samples, ")");
  std::vector<float> points;
  for (const auto& sample : index.floatsamples()) {
    COREMLRT_CHECK(sample.vector_size() == dims, what, ": a sample has ", sample.vector_size(), " values; expected ",
                   dims);
    points.insert(points.end(), sample.vector().begin(), sample.vector().end());
  }

  // Per-sample labels, the distinct labels (sorted), and the default label if any.
  Labels per_sample;
  if (knn.has_int64classlabels()) {
    per_sample.integer = true;
    per_sample.ints.assign(knn.int64classlabels().vector().begin(), knn.int64classlabels().vector().end());
  } else if (knn.has_stringclasslabels()) {
    per_sample.strings.assign(knn.stringclasslabels().vector().begin(), knn.stringclasslabels().vector().end());
  }
  const bool default_int = knn.DefaultClassLabel_case() == spec::KNearestNeighborsClassifier::kDefaultInt64Label;
  const bool default_string = knn.DefaultClassLabel_case() == spec::KNearestNeighborsClassifier::kDefaultStringLabel;
  if (per_sample.size() == 0) per_sample.integer = default_int;
  COREMLRT_CHECK(static_cast<int64_t>(per_sample.size()) == samples, what, " has ", per_sample.size(),
                 " labels for ", samples, " samples");
  COREMLRT_CHECK(!(default_int && !per_sample.integer) && !(default_string && per_sample.integer), what,
                 ": the default label's type differs from the labels' type");
  Labels classes;
  classes.integer = per_sample.integer;
  std::vector<int32_t> sample_class;
  if (per_sample.integer) {
    std::vector<int64_t> distinct = per_sample.ints;
    if (default_int) distinct.push_back(knn.defaultint64label());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    classes.ints = distinct;
    for (int64_t label : per_sample.ints)
      sample_class.push_back(static_cast<int32_t>(std::lower_bound(distinct.begin(), distinct.end(), label) - distinct.begin()));
  } else {
    std::vector<std::string> distinct = per_sample.strings;
    if (default_string) distinct.push_back(knn.defaultstringlabel());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    classes.strings = distinct;
    for (const std::string& label : per_sample.strings)
      sample_class.push_back(static_cast<int32_t>(std::lower_bound(distinct.begin(), distinct.end(), label) - distinct.begin()));
  }
  COREMLRT_CHECK(classes.size() > 0, what, " has no samples and no default label");
  int32_t default_class = -1;
  if (default_int)
    default_class = static_cast<int32_t>(std::lower_bound(classes.ints.begin(), classes.ints.end(), knn.defaultint64label()) - classes.ints.begin());
  if (default_string)
    default_class = static_cast<int32_t>(std::lower_bound(classes.strings.begin(), classes.strings.end(), knn.defaultstringlabel()) - classes.strings.begin());

  const int64_t k = knn.numberofneighbors().defaultvalue();
  COREMLRT_CHECK(k >= 1 && k <= (1 << 30), what, ": numberOfNeighbors is ", k);
  const bool inverse = knn.WeightingScheme_case() == spec::KNearestNeighborsClassifier::kInverseDistanceWeighting;
  std::string scores = program.add_model_op(
      "nearest_neighbors",
      {{"samples", f32_tensor(std::move(points), {samples, dims})},
       {"sample_class", i32_tensor(sample_class, {samples})},
       {"k", i32_scalar(static_cast<int32_t>(k))},
       {"weighting", string_scalar(inverse ? "inverse_distance" : "uniform")},
       {"default_class", i32_scalar(default_class)}},
      tensor_type(DType::Float32, {static_cast<int64_t>(classes.size())}));
  program.finish_classifier(scores, classes);
  return program.take();
}

}  // namespace coremlrt::format::classic
