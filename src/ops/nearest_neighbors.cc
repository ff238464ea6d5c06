// nearest_neighbors: Core ML's kNearestNeighborsClassifier (src/format/classic/knn_reader.cc).
// The k samples nearest to the input by Euclidean distance (computed in double; equal
// distances keep sample order) vote for their classes (`sample_class`): each with weight 1
// (uniform) or 1 / distance (inverse_distance; neighbours at distance 0, if any, share all
// the weight, as in scikit-learn). Output: fp32 [classes], each class's share of the weight,
// whose first maximum is the predicted class. With no samples the default class gets it all.
// A kd-tree index finds the same exact neighbours, so one linear search serves both.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/feature_vector.h"
#include "ops/register.h"

namespace coremlrt::ops {

namespace {

std::unique_ptr<Kernel> make_nearest_neighbors(KernelBuilder& b) {
  const Tensor samples = constant_tensor(b, "samples", DType::Float32, 2);
  const Tensor sample_class = constant_tensor(b, "sample_class", DType::Int32, 1);
  const int64_t count = samples.shape[0], dims = samples.shape[1];
  b.check(sample_class.numel() == count, sample_class.numel(), " labels for ", count, " samples");
  const int64_t k = b.const_int("k");
  b.check(k >= 1, "k must be at least 1, got ", k);
  const std::string weighting = b.const_string("weighting");
  b.check(weighting == "uniform" || weighting == "inverse_distance", "unknown weighting '", weighting, "'");
  const bool inverse = weighting == "inverse_distance";
  const int64_t default_class = b.const_int("default_class", -1);
  const Shape shape = declared_output_shape(b, 0);
  b.check(b.output_type(0).dtype == DType::Float32 && shape.size() == 1, "class scores are an fp32 vector, declared ",
          b.output_type(0).str());
  const int64_t classes = shape[0];
  for (int64_t i = 0; i < count; ++i)
    b.check(sample_class.ptr<int32_t>()[i] >= 0 && sample_class.ptr<int32_t>()[i] < classes, "sample ", i,
            " has class ", sample_class.ptr<int32_t>()[i], " of ", classes);
  b.check(default_class < classes, "default class ", default_class, " of ", classes);
  b.check(count > 0 || default_class >= 0, "has no samples and no default class");
  FeatureVector features(b, dims);
  return make_kernel([=](KernelContext& ctx) {
    const std::vector<double> x = features.read(ctx);
    float* out = ctx.allocate_output(0, DType::Float32, shape).ptr<float>();
    std::fill(out, out + classes, 0.0f);
    if (count == 0) {
      out[default_class] = 1.0f;
      return;
    }
    std::vector<double> distance(count);
    const float* s = samples.ptr<float>();
    for (int64_t i = 0; i < count; ++i) {
      double sum = 0;
      for (int64_t d = 0; d < dims; ++d) {
        const double diff = x[d] - s[i * dims + d];
        sum += diff * diff;
      }
      distance[i] = std::sqrt(sum);
    }
    const int64_t n = std::min(k, count);
    std::vector<int64_t> order(count);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int64_t a, int64_t c) {
      return distance[a] < distance[c] || (distance[a] == distance[c] && a < c);
    });
    std::vector<double> weight(classes, 0.0);
    bool exact = false;
    for (int64_t i = 0; i < n; ++i) exact = exact || distance[order[i]] == 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = distance[order[i]];
      double w = 1.0;
      if (inverse) w = exact ? (d == 0 ? 1.0 : 0.0) : 1.0 / d;
      weight[sample_class.ptr<int32_t>()[order[i]]] += w;
    }
    double total = 0;
    for (double w : weight) total += w;
    for (int64_t c = 0; c < classes; ++c) out[c] = static_cast<float>(weight[c] / total);
  });
}

}  // namespace

void register_nearest_neighbors_kernels(KernelRegistry& registry) {
  registry.add("nearest_neighbors", DTypeSet{DType::Float16, DType::Float32, DType::Float64, DType::Int32, DType::Int64},
               make_nearest_neighbors);
}

}  // namespace coremlrt::ops
