// int8_dynamic_linear: the matrix product of a neuralNetwork innerProduct or batchedMatmul
// layer whose int8DynamicQuantize flag is set (proto/nn_linear.proto, proto/nn_matrix.proto;
// translated in src/format/neural_network/linear_layers.cc and matrix_layers.cc).
//
// Inputs: x (fp32, any rank >= 1, last axis D_in), weight (int8 constant [D_out, D_in], the
// layer's int8RawValue codes) and weight_scale (fp32 constant scalar, the layer's single
// linear-quantization scale), optional bias (fp32 constant [D_out], the layer's float bias).
// Output: fp32, x's shape with the last axis D_out.
//
// NeuralNetwork.proto says only that the layer quantizes its float input to int8 at run time,
// multiplies by the int8 weights and dequantizes the result. The input rule is this engine's
// choice, stated here and in README.md:
//   scale_x = max|x| / 127 over the whole input tensor of one prediction (symmetric, per tensor)
//   q_x     = clamp(round_half_even(x / scale_x), -127, 127)       (fp32 division)
//   acc     = sum_k q_x[r, k] * weight[o, k]                         (int32)
//   y[r, o] = fp32(double(acc) * double(scale_x) * double(weight_scale)) + bias[o]   (fp32 add)
// Half to even is the rounding of the ML program `quantize` op (src/ops/quantization.cc) and
// the default IEEE mode (numpy's rint), so an emulation rounds the same ties. An all-zero x
// gives zeros (plus the bias); an x holding NaN or an infinity has no finite scale and gives NaN
// everywhere. NeuralNetwork.proto lists hasBias == false among the flag's requirements, yet
// coremltools' activate_int8_int8_matrix_multiplications sets the flag on biased layers and its
// tests of such layers (test_quantization.py, test_numpy_nn_layers.py) expect the float bias
// added to the dequantized product, and pass on macOS: Core ML runs them, so this does too.
//
// No execution backend lowers this op (src/backends/openvino claims ops by name), so the
// reference kernel here always runs it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

// Largest |q_x * weight|: 127 * 128 (an int8 weight may be -128).
constexpr int64_t kLargestTerm = 127 * 128;

std::unique_ptr<Kernel> make_int8_dynamic_linear(KernelBuilder& b) {
  const int x = b.input("x");
  b.check(b.input_type("x").dtype == DType::Float32, "x must be fp32, got ", dtype_name(b.input_type("x").dtype));
  b.check(b.output_type(0).dtype == DType::Float32, "output must be fp32");
  b.check(b.is_constant("weight") && b.is_constant("weight_scale"), "weight and weight_scale must be constants");
  const Tensor& w = b.constant("weight")->tensor;
  b.check(w.dtype == DType::Int8 && w.rank() == 2, "weight must be int8 [D_out, D_in], got ", dtype_name(w.dtype), " ",
          shape_str(w.shape));
  const Tensor& s = b.constant("weight_scale")->tensor;
  b.check(s.dtype == DType::Float32 && s.numel() == 1, "weight_scale must be one fp32 value");
  const float weight_scale = *s.ptr<float>();
  b.check(std::isfinite(weight_scale), "weight_scale must be finite, got ", weight_scale);
  const int64_t d_out = w.shape[0], d_in = w.shape[1];
  b.check(d_in >= 1 && d_out >= 1, "weight ", shape_str(w.shape), " is empty");
  std::vector<float> bias(static_cast<size_t>(d_out), 0.0f);
  if (b.has("bias")) {
    b.check(b.is_constant("bias"), "bias must be a constant");
    const Tensor& tb = b.constant("bias")->tensor;
    b.check(tb.dtype == DType::Float32 && tb.numel() == d_out, "bias must be fp32 with D_out = ", d_out, " values, got ",
            dtype_name(tb.dtype), " ", shape_str(tb.shape));
    std::copy(tb.ptr<float>(), tb.ptr<float>() + d_out, bias.begin());
  }
  b.check(d_in <= std::numeric_limits<int32_t>::max() / kLargestTerm, "D_in = ", d_in,
          " could overflow the int32 accumulator (at most ", std::numeric_limits<int32_t>::max() / kLargestTerm, ")");
  return make_kernel([x, d_in, d_out, w, weight_scale, bias](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.dtype != DType::Float32) ctx.fail("x must be fp32, got ", dtype_name(tx.dtype));
    if (tx.rank() < 1 || tx.shape.back() != d_in) ctx.fail("x ", shape_str(tx.shape), " must end in D_in = ", d_in);
    Shape shape = tx.shape;
    shape.back() = d_out;
    Tensor& out = ctx.allocate_output(0, DType::Float32, shape);
    const float* xv = tx.ptr<float>();
    float* y = out.ptr<float>();
    const int64_t n = tx.numel(), rows = n / d_in;

    float max_abs = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < n; ++i) {
      finite = finite && std::isfinite(xv[i]);
      max_abs = std::max(max_abs, std::fabs(xv[i]));
    }
    if (!finite) {
      std::fill(y, y + out.numel(), std::numeric_limits<float>::quiet_NaN());
      return;
    }
    if (max_abs == 0.0f) {
      for (int64_t r = 0; r < rows; ++r) std::copy(bias.begin(), bias.end(), y + r * d_out);
      return;
    }
    const float scale_x = max_abs / 127.0f;
    std::vector<int8_t> q(static_cast<size_t>(n));
    // nearbyint under the default rounding mode rounds half to even.
    for (int64_t i = 0; i < n; ++i)
      q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(xv[i] / scale_x), -127.0f, 127.0f));

    const int8_t* wv = w.ptr<int8_t>();
    const double dequantize = static_cast<double>(scale_x);
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* qr = q.data() + r * d_in;
      for (int64_t o = 0; o < d_out; ++o) {
        const int8_t* wo = wv + o * d_in;
        int32_t acc = 0;  // cannot overflow: d_in * kLargestTerm fits (checked at load)
        for (int64_t k = 0; k < d_in; ++k) acc += static_cast<int32_t>(qr[k]) * static_cast<int32_t>(wo[k]);
        y[r * d_out + o] =
            static_cast<float>(static_cast<double>(acc) * dequantize * static_cast<double>(weight_scale)) + bias[o];
      }
    }
  });
}

}  // namespace

void register_dynamic_quantization_kernels(KernelRegistry& registry) {
  registry.add("int8_dynamic_linear", {DType::Float32}, make_int8_dynamic_linear);
}

}  // namespace coremlrt::ops
