// Core ML's feature-engineering models (src/format/classic/feature_readers: scaler, imputer,
// normalizer, featureVectorizer, arrayFeatureExtractor, oneHotEncoder), in double precision as
// Core ML evaluates them. Each op reads its input features as one vector of doubles
// (ops/feature_vector.h) and writes its result in the dtype and static shape its output is
// declared with: fp64 or fp32 or int32 for a multi-array, fp64 [] for a double, int64 [] for an
// int64 feature. A value bound for an int64 output must be whole; anything else fails the
// prediction rather than being rounded.
//
// A one-hot encoder's sparse output (an int64-keyed dictionary inside a pipeline) is carried
// densely: fp64 [categories] with the value of key k at position k, which is how
// feature_vectorizer, its only consumer, lays such a dictionary out.
#include <cmath>

#include "ops/feature_vector.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

constexpr DTypeSet kNumbers{DType::Float16, DType::Float32, DType::Float64, DType::Int32, DType::Int64};

// Writes `values` as output 0, in its declared dtype and shape.
class OutputWriter {
 public:
  explicit OutputWriter(const KernelBuilder& b) : shape_(declared_output_shape(b, 0)), dtype_(b.output_type(0).dtype) {
    b.check(dtype_ == DType::Float64 || dtype_ == DType::Float32 || dtype_ == DType::Int32 || dtype_ == DType::Int64,
            "output must be fp64, fp32, int32 or int64, declared ", b.output_type(0).str());
  }
  int64_t size() const { return shape_numel(shape_); }

  void write(KernelContext& ctx, const std::vector<double>& values) const {
    if (static_cast<int64_t>(values.size()) != size())
      ctx.fail("computes ", values.size(), " values for an output of shape ", shape_str(shape_));
    Tensor& out = ctx.allocate_output(0, dtype_, shape_);
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = values[i];
      switch (dtype_) {
        case DType::Float64: out.ptr<double>()[i] = v; break;
        case DType::Float32: out.ptr<float>()[i] = static_cast<float>(v); break;
        default: {
          const bool fits = dtype_ == DType::Int64 ? std::fabs(v) < 9.2e18 : std::fabs(v) <= 2147483647.0;
          if (!(std::floor(v) == v && fits))
            ctx.fail("value ", v, " is bound for an ", dtype_name(dtype_), " output and is not a whole number in range");
          if (dtype_ == DType::Int64) out.ptr<int64_t>()[i] = static_cast<int64_t>(v);
          else out.ptr<int32_t>()[i] = static_cast<int32_t>(v);
        }
      }
    }
  }

 private:
  Shape shape_;
  DType dtype_;
};

// A per-element parameter of `n` values, or a single value that serves every element.
double element(const Tensor& values, int64_t i) {
  return values.numel() == 1 ? values.ptr<double>()[0] : values.ptr<double>()[i];
}

std::unique_ptr<Kernel> make_scaler(KernelBuilder& b) {
  const Tensor shift = constant_tensor(b, "shift", DType::Float64, 1);
  const Tensor scale = constant_tensor(b, "scale", DType::Float64, 1);
  OutputWriter writer(b);
  const int64_t n = writer.size();
  for (const Tensor* t : {&shift, &scale})
    b.check(t->numel() == 1 || t->numel() == n, "has ", t->numel(), " shift or scale values for ", n, " elements");
  FeatureVector features(b, n);
  return make_kernel([=](KernelContext& ctx) {
    std::vector<double> x = features.read(ctx);
    for (int64_t i = 0; i < n; ++i) x[i] = (x[i] + element(shift, i)) * element(scale, i);
    writer.write(ctx, x);
  });
}

// Replaces every element equal to `missing` (NaN: every NaN) by the imputed value for its place.
std::unique_ptr<Kernel> make_imputer(KernelBuilder& b) {
  const Tensor imputed = constant_tensor(b, "imputed", DType::Float64, 1);
  const double missing = b.const_float("missing");
  OutputWriter writer(b);
  const int64_t n = writer.size();
  b.check(imputed.numel() == 1 || imputed.numel() == n, "has ", imputed.numel(), " imputed values for ", n,
          " elements");
  FeatureVector features(b, n);
  const bool nan = std::isnan(missing);
  return make_kernel([=](KernelContext& ctx) {
    std::vector<double> x = features.read(ctx);
    for (int64_t i = 0; i < n; ++i)
      if (nan ? std::isnan(x[i]) : x[i] == missing) x[i] = element(imputed, i);
    writer.write(ctx, x);
  });
}

// x / ||x|| for the L1, L2 or max norm; a zero vector stays zero.
std::unique_ptr<Kernel> make_normalizer(KernelBuilder& b) {
  const std::string norm = b.const_string("norm");
  b.check(norm == "l1" || norm == "l2" || norm == "lmax", "unknown norm '", norm, "'");
  OutputWriter writer(b);
  const int64_t n = writer.size();
  FeatureVector features(b, n);
  return make_kernel([=](KernelContext& ctx) {
    std::vector<double> x = features.read(ctx);
    double size = 0;
    for (double v : x) {
      if (norm == "l1") size += std::fabs(v);
      else if (norm == "l2") size += v * v;
      else size = std::fmax(size, std::fabs(v));
    }
    if (norm == "l2") size = std::sqrt(size);
    if (size > 0)
      for (double& v : x) v /= size;
    writer.write(ctx, x);
  });
}

// Concatenates its inputs, input j filling `dims[j]` places. A dense one-hot dictionary
// (`sparse[j]` = 1) may be narrower than its place (the rest are zero); a key at or past
// `dims[j]` is an error, as it has no place.
std::unique_ptr<Kernel> make_feature_vectorizer(KernelBuilder& b) {
  const Tensor dims = constant_tensor(b, "dims", DType::Int32, 1);
  const Tensor sparse = constant_tensor(b, "sparse", DType::Int32, 1);
  const std::vector<int> inputs = b.variadic_input("x");
  b.check(static_cast<int64_t>(inputs.size()) == dims.numel() && dims.numel() == sparse.numel(), "has ",
          inputs.size(), " inputs for ", dims.numel(), " declared columns");
  OutputWriter writer(b);
  int64_t total = 0;
  for (int64_t j = 0; j < dims.numel(); ++j) total += dims.ptr<int32_t>()[j];
  b.check(total == writer.size(), "columns add up to ", total, " values; the output holds ", writer.size());
  std::vector<FeatureVector> columns;
  for (int index : inputs) columns.push_back(FeatureVector(std::vector<int>{index}, -1));
  return make_kernel([=](KernelContext& ctx) {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(total));
    for (size_t j = 0; j < columns.size(); ++j) {
      const std::vector<double> x = columns[j].read(ctx);
      const auto place = static_cast<size_t>(dims.ptr<int32_t>()[j]);
      if (sparse.ptr<int32_t>()[j]) {
        for (size_t k = place; k < x.size(); ++k)
          if (x[k] != 0) ctx.fail("input ", j, " has key ", k, ", past its ", place, " places");
        for (size_t k = 0; k < place; ++k) out.push_back(k < x.size() ? x[k] : 0.0);
      } else {
        if (x.size() != place) ctx.fail("input ", j, " holds ", x.size(), " values; its column takes ", place);
        out.insert(out.end(), x.begin(), x.end());
      }
    }
    writer.write(ctx, out);
  });
}

std::unique_ptr<Kernel> make_array_feature_extractor(KernelBuilder& b) {
  const Tensor indices = constant_tensor(b, "indices", DType::Int64, 1);
  OutputWriter writer(b);
  b.check(writer.size() == indices.numel(), "picks ", indices.numel(), " elements for an output of ", writer.size());
  FeatureVector features(b, -1);
  return make_kernel([=](KernelContext& ctx) {
    const std::vector<double> x = features.read(ctx);
    std::vector<double> out;
    for (int64_t i = 0; i < indices.numel(); ++i) {
      const int64_t index = indices.ptr<int64_t>()[i];
      if (index < 0 || index >= static_cast<int64_t>(x.size()))
        ctx.fail("index ", index, " is outside the input's ", x.size(), " elements");
      out.push_back(x[static_cast<size_t>(index)]);
    }
    writer.write(ctx, out);
  });
}

// One input value (a whole number) -> 1 at its category's position, 0 elsewhere. An unknown
// value is an error, or all zeros when `ignore_unknown`.
std::unique_ptr<Kernel> make_one_hot(KernelBuilder& b) {
  const Tensor categories = constant_tensor(b, "categories", DType::Int64, 1);
  const bool ignore_unknown = b.const_bool("ignore_unknown");
  OutputWriter writer(b);
  b.check(writer.size() == categories.numel(), "has ", categories.numel(), " categories for an output of ",
          writer.size());
  FeatureVector features(b, 1);
  return make_kernel([=](KernelContext& ctx) {
    const double x = features.read(ctx)[0];
    std::vector<double> out(static_cast<size_t>(categories.numel()), 0.0);
    bool known = false;
    for (int64_t i = 0; i < categories.numel(); ++i) {
      if (static_cast<double>(categories.ptr<int64_t>()[i]) == x) {
        out[static_cast<size_t>(i)] = 1.0;
        known = true;
        break;
      }
    }
    if (!known && !ignore_unknown) ctx.fail("value ", x, " is not one of the encoder's categories");
    writer.write(ctx, out);
  });
}

// String and dictionary input features (format/classic/text_feature_readers.cc) reach the
// engine as numbers, because its tensors hold none of either: a string as its int64 code, the
// index of that string in the op's `vocabulary` constant (-1 for a string not in it), and a
// dictionary as fp64 [vocabulary size], the value of each vocabulary key at its place (keys not
// in the vocabulary dropped). The caller encodes them (Model::input_vocabulary(); the Python
// layer does it for a str or dict). This is exact, not an approximation, because these models
// only ever compare a string with their own keys. A code outside [-1, size) fails.
int64_t read_code(const KernelContext& ctx, const FeatureVector& features, int64_t size) {
  const double x = features.read(ctx)[0];
  if (!(x >= -1 && x < static_cast<double>(size) && std::floor(x) == x))
    ctx.fail("string code ", x, " is outside [-1, ", size, "): not an index into the model's vocabulary");
  return static_cast<int64_t>(x);
}

int64_t vocabulary_size(KernelBuilder& b) {
  const ir::ConstValue* vocabulary = b.constant("vocabulary");
  b.check(vocabulary != nullptr && vocabulary->type.dtype == DType::String && vocabulary->type.rank == 1,
          "needs a 1-D string constant 'vocabulary'");
  return static_cast<int64_t>(vocabulary->strings.size());
}

// categoricalMapping from strings to int64: values[code], or `default` for a string not mapped.
std::unique_ptr<Kernel> make_string_to_int64(KernelBuilder& b) {
  const int64_t n = vocabulary_size(b);
  const Tensor values = constant_tensor(b, "values", DType::Int64, 1);
  const Tensor fallback = constant_tensor(b, "default", DType::Int64, 1);
  b.check(values.numel() == n, "has ", values.numel(), " values for ", n, " keys");
  b.check(fallback.numel() == 1, "default must be one value");
  // Written as int64 directly: a double (OutputWriter) would round values beyond 2^53.
  b.check(b.output_type(0).dtype == DType::Int64 && b.output_type(0).rank == 0, "output must be an int64 scalar, "
          "declared ", b.output_type(0).str());
  FeatureVector features(b, 1);
  return make_kernel([=](KernelContext& ctx) {
    const int64_t code = read_code(ctx, features, n);
    const int64_t v = code < 0 ? fallback.ptr<int64_t>()[0] : values.ptr<int64_t>()[code];
    ctx.allocate_output(0, DType::Int64, {}).ptr<int64_t>()[0] = v;
  });
}

// categoricalMapping from int64 to strings. A string output leaves the engine as a code too:
// the index into the op's `output_vocabulary` (the mapped strings in key order, then the
// default for a key not mapped), which Model::output_vocabulary() hands to the caller.
std::unique_ptr<Kernel> make_int64_to_string(KernelBuilder& b) {
  const Tensor keys = constant_tensor(b, "keys", DType::Int64, 1);
  const ir::ConstValue* vocabulary = b.constant("output_vocabulary");
  b.check(vocabulary != nullptr && vocabulary->type.dtype == DType::String &&
              static_cast<int64_t>(vocabulary->strings.size()) == keys.numel() + 1,
          "needs a string constant 'output_vocabulary' of one entry per key and the default");
  b.check(b.input_type("x").dtype == DType::Int64, "x must be int64, got ", b.input_type("x").str());
  b.check(b.output_type(0).dtype == DType::Int64 && b.output_type(0).rank == 0, "output must be an int64 scalar");
  const int x = b.input("x");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& t = ctx.input(x);
    if (t.numel() != 1) ctx.fail("x must hold one value, got ", shape_str(t.shape));
    const int64_t key = t.ptr<int64_t>()[0];  // read as int64: a double would round beyond 2^53
    const int64_t* k = keys.ptr<int64_t>();
    int64_t code = keys.numel();  // the default
    for (int64_t i = 0; i < keys.numel(); ++i)
      if (k[i] == key) code = i;
    ctx.allocate_output(0, DType::Int64, {}).ptr<int64_t>()[0] = code;
  });
}

// oneHotEncoder over string categories: 1 at the string's place in the vocabulary (the
// categories in order). A string not among them fails, or gives all zeros under IgnoreUnknown.
std::unique_ptr<Kernel> make_string_one_hot(KernelBuilder& b) {
  const int64_t n = vocabulary_size(b);
  const bool ignore_unknown = b.const_bool("ignore_unknown");
  OutputWriter writer(b);
  b.check(writer.size() == n, "has ", n, " categories for an output of ", writer.size());
  FeatureVector features(b, 1);
  return make_kernel([=](KernelContext& ctx) {
    const int64_t code = read_code(ctx, features, n);
    if (code < 0 && !ignore_unknown) ctx.fail("the string is not one of the encoder's categories");
    std::vector<double> out(static_cast<size_t>(n), 0.0);
    if (code >= 0) out[static_cast<size_t>(code)] = 1.0;
    writer.write(ctx, out);
  });
}

// dictVectorizer: its input dictionary arrives already laid out over its vocabulary (the
// model's keys), which is exactly its output; this writes it in the output's declared dtype.
std::unique_ptr<Kernel> make_dict_vectorizer(KernelBuilder& b) {
  const int64_t n = vocabulary_size(b);
  OutputWriter writer(b);
  b.check(writer.size() == n, "has ", n, " keys for an output of ", writer.size());
  FeatureVector features(b, n);
  return make_kernel([=](KernelContext& ctx) { writer.write(ctx, features.read(ctx)); });
}

// classConfidenceThresholding (format/classic/class_confidence_reader.cc): x [C] in, [2, C] out,
// row 0 x and row 1 ones (every class taken), each converted to the output's dtype.
template <class In, class Out>
void confidences_and_ones(const Tensor& x, Tensor& out) {
  const int64_t c = x.numel();
  const In* in = x.ptr<In>();
  Out* o = out.ptr<Out>();
  for (int64_t i = 0; i < c; ++i) {
    o[i] = static_cast<Out>(static_cast<double>(in[i]));
    o[c + i] = static_cast<Out>(1.0);
  }
}

std::unique_ptr<Kernel> make_class_confidence_thresholding(KernelBuilder& b) {
  const int x = b.input("x");
  const DType out_dtype = b.output_type(0).dtype;
  auto is_float = [](DType d) { return d == DType::Float16 || d == DType::Float32 || d == DType::Float64; };
  b.check(is_float(out_dtype), "output must be fp16, fp32 or fp64, declared ", b.output_type(0).str());
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& in = ctx.input(x);
    if (in.rank() != 1 || !is_float(in.dtype))
      ctx.fail("the class confidences must be an fp16, fp32 or fp64 vector [C], got ", dtype_name(in.dtype), " ",
               shape_str(in.shape));
    Tensor& out = ctx.allocate_output(0, out_dtype, {2, in.numel()});
    dispatch_all(in.dtype, "class_confidence_thresholding", [&](auto in_tag) {
      using In = typename decltype(in_tag)::type;
      dispatch_all(out_dtype, "class_confidence_thresholding", [&](auto out_tag) {
        confidences_and_ones<In, typename decltype(out_tag)::type>(in, out);
      });
    });
  });
}

}  // namespace

void register_feature_engineering_kernels(KernelRegistry& registry) {
  registry.add("scaler", kNumbers, make_scaler);
  registry.add("imputer", kNumbers, make_imputer);
  registry.add("normalizer", kNumbers, make_normalizer);
  registry.add("class_confidence_thresholding", DTypeSet{DType::Float16, DType::Float32, DType::Float64},
               make_class_confidence_thresholding);
  registry.add("feature_vectorizer", kNumbers, make_feature_vectorizer);
  registry.add("array_feature_extractor", kNumbers, make_array_feature_extractor);
  registry.add("one_hot_encoder", kNumbers, make_one_hot);
  registry.add("string_to_int64", kNumbers, make_string_to_int64);
  registry.add("int64_to_string", kNumbers, make_int64_to_string);
  registry.add("string_one_hot_encoder", kNumbers, make_string_one_hot);
  registry.add("dict_vectorizer", kNumbers, make_dict_vectorizer);
}

}  // namespace coremlrt::ops
