// Random ops (docs/design/coreml-format.md, "Random ops"): random_uniform, random_normal, random_bernoulli
// and random_categorical.
//
// Apple's generator is not documented, so the values cannot match Core ML's; what is kept is
// the distribution and the meaning of `seed`. With seed >= 0 every prediction produces the
// same values (reproducible per seed, on every platform: no std:: distribution, whose
// algorithms differ between standard libraries, is used). With seed -1 every prediction
// draws fresh values. The planner never folds these ops into constants (plan.cc), so an
// unseeded op stays random even when its inputs are constants.
//
// Values come from a counter-based generator: element i of a stream is a hash (the
// SplitMix64 finalizer) of the stream key and i. Kernels therefore keep no mutable state and
// may run on several threads at once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Stream {
 public:
  explicit Stream(uint64_t key) : key_(key) {}
  uint64_t bits(uint64_t i) const { return mix(key_ + (i + 1) * 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, 1) with 24 random bits: every value is exact in float.
  float uniform(uint64_t i) const { return static_cast<float>(bits(i) >> 40) * 0x1p-24f; }
  // Uniform in (0, 1] with 53 random bits (never 0: it feeds a logarithm).
  double open_uniform(uint64_t i) const { return static_cast<double>((bits(i) >> 11) + 1) * 0x1p-53; }

 private:
  uint64_t key_;
};

// The key of one run of one op. Seeded: a function of the seed only. Unseeded: a process-wide
// random base plus a counter, so that every run (on any thread) gets its own stream.
Stream stream_for(int64_t seed) {
  if (seed >= 0) return Stream(mix(static_cast<uint64_t>(seed) ^ 0x5eed5eed5eed5eedULL));
  static const uint64_t base = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  static std::atomic<uint64_t> runs{0};
  return Stream(mix(base + runs.fetch_add(1, std::memory_order_relaxed) * 0x632be59bd9b4e019ULL));
}

// The largest value of T below `v` (v finite): keeps uniform samples inside [low, high)
// when rounding lands on high.
template <class T>
T next_below(T v) {
  if constexpr (std::is_same_v<T, half>) {
    uint16_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    if ((bits & 0x7fff) == 0) bits = 0x8001;  // +-0 -> the negative subnormal closest to 0
    else if (bits & 0x8000) ++bits;           // negative: away from zero
    else --bits;                              // positive: toward zero
    std::memcpy(&v, &bits, sizeof bits);
    return v;
  } else {
    return std::nextafter(v, -INFINITY);
  }
}

// The output dtype is the declared one (the dtype of the op's float parameters, fp32 by default).
DType float_output_dtype(const KernelBuilder& b) {
  const DType d = b.output_type(0).dtype;
  b.check(d == DType::Float32 || d == DType::Float16, "output must be fp16 or fp32, got ", dtype_name(d));
  return d;
}

Shape read_shape(KernelContext& ctx, const Tensor& t) {
  if (t.rank() != 1) ctx.fail("shape must be a 1-D tensor, got ", shape_str(t.shape));
  Shape shape = read_ints(t);
  for (int64_t d : shape)
    if (d < 0) ctx.fail("shape ", shape_str(shape), " has a negative dimension");
  return shape;
}

// Kernels for the ops that take a `shape`: fill(i, stream) gives element i as a float.
template <class Fill>
std::unique_ptr<Kernel> shaped_kernel(KernelBuilder& b, Fill fill) {
  const int shape = b.input("shape");
  const DType dtype = float_output_dtype(b);
  const int64_t seed = b.const_int("seed", -1);
  return make_kernel([=](KernelContext& ctx) {
    Tensor& out = ctx.allocate_output(0, dtype, read_shape(ctx, ctx.input(shape)));
    const Stream stream = stream_for(seed);
    dispatch_float(dtype, "random", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = out.ptr<T>();
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = fill.template operator()<T>(static_cast<uint64_t>(i), stream);
    });
  });
}

std::unique_ptr<Kernel> random_uniform(KernelBuilder& b) {
  const double low = b.const_float("low", 0.0), high = b.const_float("high", 1.0);
  b.check(std::isfinite(low) && std::isfinite(high) && low <= high, "needs finite low <= high, got [", low, ", ", high, ")");
  const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
  return shaped_kernel(b, [=]<class T>(uint64_t i, const Stream& s) {
    const T v = static_cast<T>(lo + span * s.uniform(i));
    const T top = static_cast<T>(high);
    return (high > low && !(v < top)) ? next_below(top) : v;
  });
}

std::unique_ptr<Kernel> random_normal(KernelBuilder& b) {
  const double mean = b.const_float("mean", 0.0), stddev = b.const_float("stddev", 1.0);
  b.check(stddev >= 0, "stddev must not be negative, got ", stddev);
  return shaped_kernel(b, [=]<class T>(uint64_t i, const Stream& s) {
    // Box-Muller on the pair of uniforms (2i, 2i + 1).
    const double r = std::sqrt(-2.0 * std::log(s.open_uniform(2 * i)));
    const double z = r * std::cos(2.0 * M_PI * s.open_uniform(2 * i + 1));
    return static_cast<T>(static_cast<float>(mean + stddev * z));
  });
}

std::unique_ptr<Kernel> random_bernoulli(KernelBuilder& b) {
  const double prob = b.const_float("prob", 0.5);
  b.check(prob >= 0 && prob <= 1, "prob must be in [0, 1], got ", prob);
  const float p = static_cast<float>(prob);
  // u < p with u a multiple of 2^-24 in [0, 1): p = 0 never and p = 1 always gives 1.
  return shaped_kernel(b, [=]<class T>(uint64_t i, const Stream& s) { return static_cast<T>(s.uniform(i) < p ? 1.f : 0.f); });
}

// x [..., K] (logits, or probabilities up to a factor) -> [..., size] class indices as floats.
std::unique_ptr<Kernel> random_categorical(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dtype = float_output_dtype(b);
  b.check(b.input_type("x").dtype == dtype, "x must have the output dtype ", dtype_name(dtype));
  const std::string mode = b.const_string("mode", "logits");
  b.check(mode == "logits" || mode == "probs", "mode must be 'logits' or 'probs', got '", mode, "'");
  const int64_t size = b.const_int("size", 1);
  b.check(size >= 0, "size must not be negative, got ", size);
  const int64_t seed = b.const_int("seed", -1);
  const bool logits = mode == "logits";
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 1) ctx.fail("x must have rank >= 1");
    const int64_t classes = tx.shape.back(), rows = classes ? tx.numel() / classes : 0;
    if (classes == 0 && size > 0) ctx.fail("x has no classes to sample from");
    Shape shape = tx.shape;
    shape.back() = size;
    Tensor& out = ctx.allocate_output(0, tx.dtype, shape);
    const Stream stream = stream_for(seed);
    std::vector<double> cdf(static_cast<size_t>(classes));
    dispatch_float(tx.dtype, "random_categorical", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = tx.ptr<T>();
      T* o = out.ptr<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = in + r * classes;
        // Unnormalized weights: exp(logit - max) for logits (softmax), the values for probs.
        double top = -INFINITY;
        if (logits)
          for (int64_t k = 0; k < classes; ++k) top = std::max(top, static_cast<double>(static_cast<float>(row[k])));
        double total = 0;
        for (int64_t k = 0; k < classes; ++k) {
          const double v = static_cast<float>(row[k]);
          const double w = logits ? (std::isinf(top) && v == top ? 1.0 : std::exp(v - top)) : v;
          if (!(w >= 0) || std::isinf(w)) ctx.fail("row ", r, " of x has an invalid ", mode, " value ", v);
          total += w;
          cdf[k] = total;
        }
        if (!(total > 0)) ctx.fail("row ", r, " of x gives every class probability 0");
        for (int64_t j = 0; j < size; ++j) {
          const double target = stream.uniform(static_cast<uint64_t>(r * size + j)) * total;
          // The first class whose cumulative weight exceeds the target (never a class of weight 0).
          const int64_t k = std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin();
          o[r * size + j] = static_cast<T>(static_cast<float>(std::min(k, classes - 1)));
        }
      }
    });
  });
}

}  // namespace

void register_random_kernels(KernelRegistry& registry) {
  registry.add("random_uniform", kFloat, random_uniform).traits.never_fold = true;
  registry.add("random_normal", kFloat, random_normal).traits.never_fold = true;
  registry.add("random_bernoulli", kFloat, random_bernoulli).traits.never_fold = true;
  registry.add("random_categorical", kFloat, random_categorical).traits.never_fold = true;
}

}  // namespace coremlrt::ops
