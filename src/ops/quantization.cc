// Runtime (activation) quantization, iOS17 (docs/design/coreml-format.md, "Activation quantization"):
//   quantize:   q = clip(round_half_even(x / scale) + zero_point, range of int8 or uint8)
//   dequantize: y = scale * (q - zero_point)
// scale and zero_point are constants, each either one value (per tensor) or a vector with
// one value per index of `axis` (per axis). Arithmetic is in float; x / scale is a true
// division (not a multiplication by 1 / scale), so ties round exactly as the formula says.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

std::vector<float> const_values(const KernelBuilder& b, const std::string& name) {
  const ir::ConstValue* v = b.constant(name);
  b.check(v != nullptr, "missing required parameter '", name, "'");
  b.check(v->type.kind == ir::TypeKind::Tensor && v->tensor.rank() <= 1, "parameter '", name,
          "' must be a scalar or a vector, got ", v->type.str());
  const Tensor& t = v->tensor;
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_all(t.dtype, name.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(static_cast<compute_t<T>>(t.ptr<T>()[i]));
  });
  return out;
}

// scale and zero_point as read at load, and the axis they run along (if any is a vector).
struct QuantParams {
  std::vector<float> scale, zero_point;  // size 1 (per tensor) or the axis length
  bool vector = false;
  int64_t axis = 0;  // as given; normalized against the input rank at run time

  // Reads the parameters of quantize or dequantize; `zp_dtype` is the zero point's
  // required dtype (the quantized type).
  static QuantParams read(KernelBuilder& b, DType zp_dtype) {
    QuantParams p;
    const ir::ValueType& st = b.input_type("scale");
    b.check(st.dtype == DType::Float32 || st.dtype == DType::Float16, "scale must be fp16 or fp32, got ",
            dtype_name(st.dtype));
    p.scale = const_values(b, "scale");
    p.zero_point = {0.f};
    if (b.has("zero_point")) {
      const DType zd = b.input_type("zero_point").dtype;
      b.check(zd == zp_dtype, "zero_point is ", dtype_name(zd), " but the quantized type is ", dtype_name(zp_dtype));
      p.zero_point = const_values(b, "zero_point");
    }
    b.check(!p.scale.empty() && !p.zero_point.empty(), "scale and zero_point must not be empty");
    const bool scale_vec = b.constant("scale")->tensor.rank() == 1;
    const bool zp_vec = b.has("zero_point") && b.constant("zero_point")->tensor.rank() == 1;
    p.vector = scale_vec || zp_vec;
    if (scale_vec && zp_vec)
      b.check(p.scale.size() == p.zero_point.size(), "scale has ", p.scale.size(), " values but zero_point ",
              p.zero_point.size());
    if (p.vector) {
      b.check(b.has("axis"), "axis is required when scale or zero_point is a vector");
      p.axis = b.const_int("axis");
      const ir::ValueType& in = b.input_type("input");
      if (in.rank >= 0) {
        b.check(p.axis >= -in.rank && p.axis < in.rank, "axis ", p.axis, " is out of range for input ", in.str());
        const int64_t dim = in.dims[static_cast<size_t>(p.axis < 0 ? p.axis + in.rank : p.axis)];
        const size_t n = std::max(p.scale.size(), p.zero_point.size());
        b.check(dim < 0 || static_cast<int64_t>(n) == dim, "scale/zero_point have ", n,
                " values but input dimension ", p.axis, " has ", dim);
      }
    }
    return p;
  }

  // Calls fn(index, scale, zero_point) for every element of a tensor of `shape`.
  template <class Fn>
  void for_each(KernelContext& ctx, const Shape& shape, Fn&& fn) const {
    const int64_t total = shape_numel(shape);
    if (!vector) {
      for (int64_t i = 0; i < total; ++i) fn(i, scale[0], zero_point[0]);
      return;
    }
    const int64_t rank = static_cast<int64_t>(shape.size());
    if (axis < -rank || axis >= rank) ctx.fail("axis ", axis, " is out of range for rank ", rank);
    const int64_t a = axis < 0 ? axis + rank : axis;
    const int64_t dim = shape[a];
    const size_t n = std::max(scale.size(), zero_point.size());
    if (static_cast<int64_t>(n) != dim)
      ctx.fail("scale/zero_point have ", n, " values but input dimension ", axis, " has ", dim);
    int64_t inner = 1;
    for (int64_t d = a + 1; d < rank; ++d) inner *= shape[d];
    for (int64_t i = 0; i < total; ++i) {
      const size_t c = static_cast<size_t>((i / inner) % dim);
      fn(i, scale[scale.size() == 1 ? 0 : c], zero_point[zero_point.size() == 1 ? 0 : c]);
    }
  }
};

template <class Q>
void quantize_typed(KernelContext& ctx, const QuantParams& p, const std::vector<float>& x, const Shape& shape, Tensor& out) {
  constexpr float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
  Q* o = out.ptr<Q>();
  p.for_each(ctx, shape, [&](int64_t i, float scale, float zp) {
    // nearbyint under the default rounding mode rounds half to even. NaN quantizes to the
    // zero point; infinities clip.
    float q = std::nearbyint(x[i] / scale);
    if (std::isnan(q)) q = 0;
    o[i] = static_cast<Q>(std::clamp(q + zp, lo, hi));
  });
}

std::unique_ptr<Kernel> make_quantize(KernelBuilder& b) {
  const int input = b.input("input");
  const DType din = b.input_type("input").dtype;
  b.check(din == DType::Float32 || din == DType::Float16, "input must be fp16 or fp32, got ", dtype_name(din));
  const std::string out_name = b.const_string("output_dtype");
  b.check(out_name == "uint8" || out_name == "int8", "output_dtype must be 'uint8' or 'int8', got '", out_name, "'");
  const DType dout = out_name == "uint8" ? DType::UInt8 : DType::Int8;
  const QuantParams p = QuantParams::read(b, dout);
  for (float s : p.scale) b.check(s != 0 && std::isfinite(s), "scale values must be finite and non-zero, got ", s);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& t = ctx.input(input);
    std::vector<float> x(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::Float16) half_to_float(t.ptr<half>(), x.data(), t.numel());
    else if (t.dtype == DType::Float32) std::copy(t.ptr<float>(), t.ptr<float>() + t.numel(), x.begin());
    else ctx.fail("input must be fp16 or fp32, got ", dtype_name(t.dtype));
    Tensor& out = ctx.allocate_output(0, dout, t.shape);
    if (dout == DType::UInt8) quantize_typed<uint8_t>(ctx, p, x, t.shape, out);
    else quantize_typed<int8_t>(ctx, p, x, t.shape, out);
  });
}

std::unique_ptr<Kernel> make_dequantize(KernelBuilder& b) {
  const int input = b.input("input");
  const DType din = b.input_type("input").dtype;
  b.check(din == DType::UInt8 || din == DType::Int8, "input must be uint8 or int8, got ", dtype_name(din));
  const QuantParams p = QuantParams::read(b, din);
  const DType dout = b.input_type("scale").dtype;  // the output takes the scale's dtype
  b.check(b.output_type(0).dtype == dout, "output dtype must equal scale's");
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& t = ctx.input(input);
    if (t.dtype != din) ctx.fail("input is ", dtype_name(t.dtype), "; expected ", dtype_name(din));
    std::vector<float> y(static_cast<size_t>(t.numel()));
    auto run = [&](auto* q) {
      p.for_each(ctx, t.shape, [&](int64_t i, float scale, float zp) { y[i] = scale * (static_cast<float>(q[i]) - zp); });
    };
    if (din == DType::UInt8) run(t.ptr<uint8_t>());
    else run(t.ptr<int8_t>());
    Tensor& out = ctx.allocate_output(0, dout, t.shape);
    if (dout == DType::Float16) float_to_half(y.data(), out.ptr<half>(), out.numel());
    else std::copy(y.begin(), y.end(), out.ptr<float>());
  });
}

}  // namespace

void register_quantization_kernels(KernelRegistry& registry) {
  registry.add("quantize", kFloat, make_quantize, 17);
  registry.add("dequantize", {DType::Int8, DType::UInt8}, make_dequantize, 17);
}

}  // namespace coremlrt::ops
