// rnn, gru and lstm (docs/design/coreml-format.md, "Recurrent layers"), computed in float with the state kept
// in float.
//
// Layout facts that differ from PyTorch: LSTM gate blocks are [i, f, o, z], GRU blocks are
// [r, o, z], and `bias` is the sum of the input and hidden biases. Output positions follow
// Core ML: a "reverse" layer emits its sequence in processing order (step k holds the state
// after reading x[s-1-k]); a bidirectional LSTM aligns the backward half with input time
// (as PyTorch does). Without output_sequence the output is the final state.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "ops/gemm.h"
#include "ops/recurrent_parts.h"
#include "ops/register.h"
#include "ops/thread_pool.h"
#include "ops/util.h"
#include "ops/vector_math.h"

namespace coremlrt::ops {

namespace {

using recurrent_parts::for_each_step;
using recurrent_parts::kMaxBlocks;
#ifdef COREMLRT_RECURRENT_DOTS
using recurrent_parts::gate_dots;
using recurrent_parts::have_gate_dots;
using recurrent_parts::have_project_dots;
using recurrent_parts::project_dots;
#endif

enum class Act { Sigmoid, Tanh, Relu, Linear, HardSigmoid, ScaledTanh };

Act parse_act(KernelBuilder& b, const std::string& param, const std::string& fallback) {
  std::string name = b.const_string(param, fallback);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "sigmoid") return Act::Sigmoid;
  if (name == "tanh") return Act::Tanh;
  if (name == "relu") return Act::Relu;
  if (name == "linear") return Act::Linear;
  if (name == "hard_sigmoid" || name == "sigmoid_hard") return Act::HardSigmoid;
  if (name == "scaled_tanh") return Act::ScaledTanh;
  b.fail("unsupported ", param, " '", name, "'");
}

// The activations take no parameters here; hard_sigmoid and scaled_tanh use the MIL
// defaults of sigmoid_hard (alpha 0.2, beta 0.5) and scaled_tanh (alpha 1, beta 1).
inline float apply(Act act, float v) {
  switch (act) {
    case Act::Sigmoid: return 1.0f / (1.0f + std::exp(-v));
    case Act::Tanh:
    case Act::ScaledTanh: return std::tanh(v);
    case Act::Relu: return v > 0 ? v : 0.0f;
    case Act::Linear: return v;
    case Act::HardSigmoid: return std::clamp(0.2f * v + 0.5f, 0.0f, 1.0f);
  }
  return v;
}

// act applied in place to v[0, n): sigmoid and tanh eight values at a time (ops/vector_math.h).
[[gnu::always_inline]] inline void activate_lanes(Act act, float* v, int64_t n) {
  switch (act) {
    case Act::Sigmoid: return map_lanes(v, n, [](Lanes& x) { sigmoid_lanes(x); });
    case Act::Tanh:
    case Act::ScaledTanh: return map_lanes(v, n, [](Lanes& x) { tanh_lanes(x); });
    default:
      for (int64_t i = 0; i < n; ++i) v[i] = apply(act, v[i]);
  }
}

COREMLRT_LANES_VERSIONS(void activate(Act act, float* v, int64_t n) { activate_lanes(act, v, n); })

// dot products with their rows (gemm's dot form), so no transposed copy is made.
struct Weights {
  Tensor ih, hh;             // [G*H, I], [G*H, H]
  std::vector<float> bias;   // [G*H], zeros when absent
  std::vector<float> extra;  // lstm: peephole [3H] (may be empty); gru: input_bias [3H]
};

const Tensor& weight_tensor(KernelBuilder& b, const std::string& param) {
  b.check(b.is_constant(param), param, " must be a compile-time constant");
  const Tensor& t = b.constant(param)->tensor;
  b.check(is_float(t.dtype), param, " must be floating point, got ", dtype_name(t.dtype));
  return t;
}

std::vector<float> weight_floats(KernelBuilder& b, const std::string& param) { return to_floats(weight_tensor(b, param)); }

Weights read_weights(KernelBuilder& b, int gates, const std::string& suffix, int64_t& input_size, int64_t& hidden) {
  const std::string ih = "weight_ih" + suffix, hh = "weight_hh" + suffix, bias = "bias" + suffix;
  b.check(b.has(ih) && b.has(hh), "missing ", ih, " or ", hh);
  const Shape ih_shape = weight_tensor(b, ih).shape, hh_shape = weight_tensor(b, hh).shape;
  b.check(hh_shape.size() == 2 && hh_shape[0] == gates * hh_shape[1], hh, " must be [", gates, "*H, H], got ",
          shape_str(hh_shape));
  hidden = hh_shape[1];
  b.check(ih_shape.size() == 2 && ih_shape[0] == gates * hidden, ih, " must be [", gates, "*H, I], got ",
          shape_str(ih_shape));
  input_size = ih_shape[1];
  const int64_t gh = gates * hidden;
  Weights w;
  w.ih = matrix_source(weight_tensor(b, ih));
  w.hh = matrix_source(weight_tensor(b, hh));
  w.bias = b.has(bias) ? weight_floats(b, bias) : std::vector<float>(static_cast<size_t>(gh), 0.0f);
  b.check(static_cast<int64_t>(w.bias.size()) == gh, bias, " must have ", gh, " values");
  return w;
}

// Per-call shapes and the float views of x and the outputs.
struct Sequence {
  int64_t seq, batch, input, hidden, dirs;
  bool output_sequence;
  const float* x;
  float* out;  // [seq or 1, batch, dirs*H]

  // Where direction d writes its state after processing step k (input time t).
  void store(int64_t k, int64_t t, int d, const float* h, bool aligned) const {
    if (!output_sequence) return;
    const int64_t pos = aligned ? t : k;
    for (int64_t j = 0; j < batch; ++j)
      std::copy(h + j * hidden, h + (j + 1) * hidden, out + (pos * batch + j) * dirs * hidden + d * hidden);
  }
  void store_final(int d, const float* h, float* dst) const {
    for (int64_t j = 0; j < batch; ++j)
      std::copy(h + j * hidden, h + (j + 1) * hidden, dst + j * dirs * hidden + d * hidden);
  }
  // x_t @ W_ih^T + bias for every step at once: [seq*batch, G*H].
  std::vector<float> project(const Weights& w, int gates, const float* input_bias) const {
    const int64_t gh = gates * hidden;
    const int64_t rows = seq * batch;
    std::vector<float> xw(static_cast<size_t>(rows * gh));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < gh; ++g) xw[r * gh + g] = w.bias[g] + (input_bias ? input_bias[g] : 0.0f);
#ifdef COREMLRT_RECURRENT_DOTS
    if (w.ih.dtype == DType::Float32 && gh % 8 == 0 && input % 8 == 0 && have_project_dots()) {
      // Panels of eight rows of W_ih, split over threads as gemm splits its columns.
      const int64_t panels = gh / 8;
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(1, rows * 8 * input));
      // Each range of panels fetches its share of W_hh for the steps (project_dots), where the
      // product does at least one multiply-add per byte of W_hh (else it cannot hide the fetch).
      const char* hh = w.hh.ptr<const char>();
      const int64_t hh_bytes = rows * input >= 4 * hidden ? static_cast<int64_t>(w.hh.nbytes()) : 0;
      parallel_for(panels, grain, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * hh_bytes / panels / 64 * 64, last = end * hh_bytes / panels / 64 * 64;
        project_dots(rows, (end - begin) * 8, input, x, input, w.ih.ptr<float>() + begin * 8 * input,
                     xw.data() + begin * 8, gh, hh + first, last - first);
      });
      return xw;
    }
#endif
    gemm(rows, gh, input, MatrixView(x, input), matrix_view(w.ih, 0, 1, input), xw.data(), gh, true);
    return xw;
  }
};

// Checks x [s, b, I] and the state inputs, allocates outputs and runs `body(seq, states)`.
// states[i] holds the float copy of state input i; the final states are written back from them.
template <class Body>
void run_layer(KernelContext& ctx, int x, const std::vector<int>& state_inputs, int64_t input_size, int64_t hidden,
               int64_t dirs, bool output_sequence, Body&& body) {
  const Tensor& tx = ctx.input(x);
  if (tx.rank() != 3 || tx.shape[2] != input_size)
    ctx.fail("x must be [s, b, ", input_size, "], got ", shape_str(tx.shape));
  const int64_t seq = tx.shape[0], batch = tx.shape[1];
  // A state is [b, D*H]. One of more rows is read for its first b: coremltools' torch frontend
  // sizes the zero initial state of an lstm over a packed sequence by the longest sequence length
  // rather than the batch (its _pack_padded_sequence passes the lengths on as batch_sizes), and
  // its test of that conversion expects Core ML to give torch's result.
  const int64_t row = dirs * hidden;
  std::vector<std::vector<float>> states;
  for (int index : state_inputs) {
    const Tensor& t = ctx.input(index);
    const bool more_rows = t.rank() == 2 && t.shape[1] == row && t.shape[0] > batch;
    if (t.numel() != batch * row && !more_rows)
      ctx.fail("initial state ", shape_str(t.shape), " must be [", batch, ", ", row, "]");
    std::vector<float> scratch;
    const float* p = read_floats(t, scratch);
    states.emplace_back(p, p + batch * row);
  }
  Tensor& out = ctx.allocate_output(0, tx.dtype, {output_sequence ? seq : 1, batch, dirs * hidden});
  std::vector<float> xs, os;
  Sequence s{seq, batch, input_size, hidden, dirs, output_sequence, read_floats(tx, xs), float_output(out, os)};
  body(s, states);
  if (!output_sequence) std::copy(states[0].begin(), states[0].end(), s.out);  // the final h
  commit_float_output(out, s.out);
  for (size_t i = 0; i < states.size(); ++i) {
    Tensor& t = ctx.allocate_output(static_cast<int>(i) + 1, tx.dtype, {batch, dirs * hidden});
    std::vector<float> buf;
    float* p = float_output(t, buf);
    std::copy(states[i].begin(), states[i].end(), p);
    commit_float_output(t, p);
  }
}

void check_dtypes(KernelBuilder& b, int outputs) {
  const DType dx = b.input_type("x").dtype;
  b.check(dx == DType::Float32 || (dx == DType::Float16 && b.ios_version() >= 17),
          "x must be fp32 (or fp16 from iOS17 on), got ", dtype_name(dx));
  for (int i = 0; i < outputs; ++i) b.check(b.output_type(i).dtype == dx, "output dtypes must equal x's");
}

// Copies direction d's slice [b, H] out of a [b, D*H] state, and back.
void take_slice(const std::vector<float>& all, int d, int64_t batch, int64_t hidden, int64_t dirs, float* dst) {
  for (int64_t j = 0; j < batch; ++j)
    std::copy_n(all.data() + j * dirs * hidden + d * hidden, hidden, dst + j * hidden);
}
void put_slice(std::vector<float>& all, int d, int64_t batch, int64_t hidden, int64_t dirs, const float* src) {
  for (int64_t j = 0; j < batch; ++j)
    std::copy_n(src + j * hidden, hidden, all.data() + j * dirs * hidden + d * hidden);
}

// How lstm and rnn split a step: blocks of `units` hidden units (at least kUnits, a multiple of
// 8), each computing its rows of every gate (contiguous row ranges of W_hh) and then the new
// state of its units, over `parts` threads (one where a step's product h @ W_hh^T is under
// kMinParallelStepMacs multiply-adds).
constexpr int64_t kUnits = 16;
constexpr int64_t kMinParallelStepMacs = int64_t{1} << 16;

struct StepBlocks {
  int64_t units, blocks;
  int parts;
  StepBlocks(int64_t batch, int64_t gates, int64_t hidden) {
    units = std::max(kUnits, (hidden + kMaxBlocks * 8 - 1) / (kMaxBlocks * 8) * 8);
    blocks = (hidden + units - 1) / units;
    const bool small = batch * gates * hidden * hidden < kMinParallelStepMacs;
    parts = small ? 1 : static_cast<int>(std::min<int64_t>(available_threads(), blocks));
  }
};

// g [batch, gates, n] = x_t + h_{t-1} @ W_hh^T for the rows of the gates' units [u0, u0 + n),
// x_t and W_hh holding gates * hidden columns and rows. Each element is summed as gemm sums it
// over all rows at once (ops/gemm.cc); gate_dots, where it applies, sums it the same way.
void block_product(const float* h, const Weights& w, const float* xt, int64_t batch, int64_t gates, int64_t hidden,
                   int64_t u0, int64_t n, bool dots, float* g) {
  const int64_t H = hidden, G = gates * hidden;
#ifdef COREMLRT_RECURRENT_DOTS
  if (dots) {
    gate_dots(h, w.hh.ptr<float>() + u0 * H, H, n, gates, xt + u0, g);
    return;
  }
#else
  (void)dots;
#endif
  for (int64_t j = 0; j < batch; ++j)
    for (int64_t q = 0; q < gates; ++q) std::copy_n(xt + j * G + q * H + u0, n, g + (j * gates + q) * n);
  for (int64_t q = 0; q < gates; ++q)
    gemm(batch, n, H, MatrixView(h, H), matrix_view(w.hh, (q * H + u0) * H, 1, H), g + q * n, gates * n, true);
}

// Whether block_product may use gate_dots.
bool use_gate_dots(const Weights& w, int64_t batch, int64_t hidden) {
#ifdef COREMLRT_RECURRENT_DOTS
  return batch == 1 && hidden % 8 == 0 && w.hh.dtype == DType::Float32 && have_gate_dots();
#else
  (void)w, (void)batch, (void)hidden;
  return false;
#endif
}

std::unique_ptr<Kernel> make_lstm(KernelBuilder& b) {
  check_dtypes(b, 3);
  const int x = b.input("x"), h0 = b.input("initial_h"), c0 = b.input("initial_c");
  const std::string direction = b.const_string("direction", "forward");
  b.check(direction == "forward" || direction == "reverse" || direction == "bidirectional", "unsupported direction '",
          direction, "'");
  const bool bidir = direction == "bidirectional";
  const bool output_sequence = b.const_bool("output_sequence", false);
  const Act rec = parse_act(b, "recurrent_activation", "sigmoid"), cell = parse_act(b, "cell_activation", "tanh"),
            act = parse_act(b, "activation", "tanh");
  const bool has_clip = b.has("clip");
  const float clip = static_cast<float>(b.const_float("clip", 0.0));
  int64_t input_size = 0, hidden = 0;
  std::vector<Weights> dirs;
  for (int d = 0; d < (bidir ? 2 : 1); ++d) {
    const std::string suffix = d == 0 ? "" : "_back";
    int64_t in_d = 0, hid_d = 0;
    dirs.push_back(read_weights(b, 4, suffix, in_d, hid_d));
    b.check(d == 0 || (in_d == input_size && hid_d == hidden), "backward weights differ in shape from forward ones");
    input_size = in_d;
    hidden = hid_d;
    if (b.has("peephole" + suffix)) {
      dirs.back().extra = weight_floats(b, "peephole" + suffix);
      b.check(static_cast<int64_t>(dirs.back().extra.size()) == 3 * hidden, "peephole must have 3*H values");
    }
  }
  const bool reverse = direction == "reverse";
  return make_kernel([=](KernelContext& ctx) {
    const int64_t ndirs = static_cast<int64_t>(dirs.size());
    run_layer(ctx, x, {h0, c0}, input_size, hidden, ndirs, output_sequence,
              [&](const Sequence& s, std::vector<std::vector<float>>& states) {
                const int64_t H = hidden, B = s.batch, G = 4 * H;
                const StepBlocks split(B, 4, H);
                // h of the step before and the one being computed: blocks write h_t while
                // other blocks still read h_{t-1}.
                std::vector<float> hs(2 * B * H), c(B * H);
                std::vector<std::vector<float>> scratch(static_cast<size_t>(split.parts),
                                                        std::vector<float>(static_cast<size_t>(B * 4 * split.units)));
                for (int d = 0; d < ndirs; ++d) {
                  const Weights& w = dirs[d];
                  const bool back = reverse || d == 1, dots = use_gate_dots(w, B, H);
                  const std::vector<float> xw = s.project(w, 4, nullptr);
                  take_slice(states[0], d, B, H, ndirs, hs.data());
                  take_slice(states[1], d, B, H, ndirs, c.data());
                  const float* peep = w.extra.empty() ? nullptr : w.extra.data();
                  for_each_step(s.seq, split.blocks, split.parts, [&](int part, int64_t k, int64_t block) {
                    const int64_t t = back ? s.seq - 1 - k : k;
                    const float* h_prev = hs.data() + (k % 2) * B * H;
                    float* h_next = hs.data() + (1 - k % 2) * B * H;
                    const int64_t u0 = block * split.units, n = std::min(split.units, H - u0);
                    float* g0 = scratch[part].data();
                    block_product(h_prev, w, xw.data() + t * B * G, B, 4, H, u0, n, dots, g0);
                    // The units' new state, gate by gate so that the activations run eight lanes
                    // at a time; the same operations on each value as over whole rows.
                    for (int64_t j = 0; j < B; ++j) {
                      float* g = g0 + j * 4 * n;  // i, f, o, z
                      float* hj = h_next + j * H + u0;
                      float* cj = c.data() + j * H + u0;
                      if (peep)
                        for (int64_t u = 0; u < n; ++u) {
                          g[u] += peep[u0 + u] * cj[u];
                          g[n + u] += peep[H + u0 + u] * cj[u];
                        }
                      activate(rec, g, 2 * n);
                      activate(cell, g + 3 * n, n);
                      for (int64_t u = 0; u < n; ++u) {
                        const float c_new = g[n + u] * cj[u] + g[u] * g[3 * n + u];
                        cj[u] = has_clip ? std::clamp(c_new, -clip, clip) : c_new;
                      }
                      if (peep)
                        for (int64_t u = 0; u < n; ++u) g[2 * n + u] += peep[2 * H + u0 + u] * cj[u];
                      activate(rec, g + 2 * n, n);
                      std::copy_n(cj, n, hj);
                      activate(act, hj, n);
                      for (int64_t u = 0; u < n; ++u) hj[u] *= g[2 * n + u];
                      if (s.output_sequence)
                        std::copy_n(hj, n, s.out + ((bidir ? t : k) * B + j) * ndirs * H + d * H + u0);
                    }
                  });
                  const float* h = hs.data() + (s.seq % 2) * B * H;
                  put_slice(states[0], d, B, H, ndirs, h);
                  put_slice(states[1], d, B, H, ndirs, c.data());
                }
              });
  });
}

std::unique_ptr<Kernel> make_gru(KernelBuilder& b) {
  check_dtypes(b, 2);
  const int x = b.input("x"), h0 = b.input("initial_h");
  const std::string direction = b.const_string("direction", "forward");
  b.check(direction == "forward" || direction == "reverse", "unsupported direction '", direction, "'");
  const bool reverse = direction == "reverse", output_sequence = b.const_bool("output_sequence", false);
  const Act rec = parse_act(b, "recurrent_activation", "sigmoid"), act = parse_act(b, "activation", "tanh");
  const bool reset_after = b.const_bool("reset_after", false);  // iOS18
  int64_t input_size = 0, hidden = 0;
  Weights w = read_weights(b, 3, "", input_size, hidden);
  w.extra = b.has("input_bias") ? weight_floats(b, "input_bias") : std::vector<float>(3 * hidden, 0.0f);
  b.check(static_cast<int64_t>(w.extra.size()) == 3 * hidden, "input_bias must have 3*H values");
  // The o-gate hidden bias stays apart: with reset_after it is scaled by r along with W_ho h.
  std::vector<float> bias_o(w.bias.begin() + hidden, w.bias.begin() + 2 * hidden);
  std::fill(w.bias.begin() + hidden, w.bias.begin() + 2 * hidden, 0.0f);
  return make_kernel([=](KernelContext& ctx) {
    run_layer(ctx, x, {h0}, input_size, hidden, 1, output_sequence,
              [&](const Sequence& s, std::vector<std::vector<float>>& states) {
                const int64_t H = hidden, B = s.batch, G = 3 * H;
                std::vector<float>& h = states[0];
                std::vector<float> hw(B * G), r(B * H), z(B * H), rh(B * H), ho(B * H), o(B * H);
                const std::vector<float> xw = s.project(w, 3, w.extra.data());
                for (int64_t k = 0; k < s.seq; ++k) {
                  const int64_t t = reverse ? s.seq - 1 - k : k;
                  const float* xt = xw.data() + t * B * G;
                  // h @ [W_hr|W_ho|W_hz]^T
                  gemm(B, G, H, MatrixView(h.data(), H), matrix_view(w.hh, 0, 1, H), hw.data(), G, false);
                  for (int64_t j = 0; j < B; ++j)
                    for (int64_t u = 0; u < H; ++u) {
                      r[j * H + u] = xt[j * G + u] + hw[j * G + u];
                      z[j * H + u] = xt[j * G + 2 * H + u] + hw[j * G + 2 * H + u];
                    }
                  activate(rec, r.data(), B * H);
                  activate(rec, z.data(), B * H);
                  for (int64_t i = 0; i < B * H; ++i) rh[i] = r[i] * h[i];
                  // Without reset_after the reset gate scales h before W_ho: W_ho (r * h).
                  if (!reset_after)  // rows H..2H of W_hh are W_ho
                    gemm(B, H, H, MatrixView(rh.data(), H), matrix_view(w.hh, H * H, 1, H), ho.data(), H, false);
                  for (int64_t j = 0; j < B; ++j)
                    for (int64_t u = 0; u < H; ++u) {
                      const float rec_part = reset_after ? r[j * H + u] * (hw[j * G + H + u] + bias_o[u])
                                                         : ho[j * H + u] + bias_o[u];
                      o[j * H + u] = xt[j * G + H + u] + rec_part;
                    }
                  activate(act, o.data(), B * H);
                  for (int64_t i = 0; i < B * H; ++i) h[i] = (1.0f - z[i]) * o[i] + z[i] * h[i];
                  s.store(k, t, 0, h.data(), false);
                }
              });
  });
}

std::unique_ptr<Kernel> make_rnn(KernelBuilder& b) {
  check_dtypes(b, 2);
  const int x = b.input("x"), h0 = b.input("initial_h");
  const std::string direction = b.const_string("direction", "forward");
  b.check(direction == "forward" || direction == "reverse", "unsupported direction '", direction, "'");
  const bool reverse = direction == "reverse", output_sequence = b.const_bool("output_sequence", false);
  const Act act = parse_act(b, "activation", "tanh");
  // Not an input of the ML program op: the neuralNetwork simpleRecurrent layer clips the
  // pre-activation to [-clip, clip] (format/neural_network/recurrent_layers.cc), which changes
  // the result of an unbounded activation (ReLU, linear).
  const float clip = b.has("preactivation_clip") ? static_cast<float>(b.const_float("preactivation_clip")) : 0.0f;
  b.check(clip >= 0 && std::isfinite(clip), "preactivation_clip must be finite and not negative, got ", clip);
  int64_t input_size = 0, hidden = 0;
  const Weights w = read_weights(b, 1, "", input_size, hidden);
  return make_kernel([=](KernelContext& ctx) {
    run_layer(ctx, x, {h0}, input_size, hidden, 1, output_sequence,
              [&](const Sequence& s, std::vector<std::vector<float>>& states) {
                const int64_t H = hidden, B = s.batch;
                const StepBlocks split(B, 1, H);
                const bool dots = use_gate_dots(w, B, H);
                std::vector<float> hs(2 * B * H);  // h_{t-1} and h_t, as in lstm
                std::copy(states[0].begin(), states[0].end(), hs.begin());
                std::vector<std::vector<float>> scratch(static_cast<size_t>(split.parts),
                                                        std::vector<float>(static_cast<size_t>(B * split.units)));
                const std::vector<float> xw = s.project(w, 1, nullptr);
                for_each_step(s.seq, split.blocks, split.parts, [&](int part, int64_t k, int64_t block) {
                  const int64_t t = reverse ? s.seq - 1 - k : k;
                  const float* h_prev = hs.data() + (k % 2) * B * H;
                  float* h_next = hs.data() + (1 - k % 2) * B * H;
                  const int64_t u0 = block * split.units, n = std::min(split.units, H - u0);
                  float* pre = scratch[part].data();  // [B, n]
                  block_product(h_prev, w, xw.data() + t * B * H, B, 1, H, u0, n, dots, pre);
                  for (int64_t j = 0; j < B; ++j) {
                    float* hj = h_next + j * H + u0;
                    const float* p = pre + j * n;
                    for (int64_t u = 0; u < n; ++u)
                      hj[u] = clip > 0 ? std::min(std::max(p[u], -clip), clip) : p[u];  // NaN stays NaN
                    activate(act, hj, n);
                    if (s.output_sequence) std::copy_n(hj, n, s.out + (k * B + j) * H + u0);
                  }
                });
                const float* h = hs.data() + (s.seq % 2) * B * H;
                std::copy(h, h + B * H, states[0].begin());
              });
  });
}

// Per step of x [seq, batch, I]: the gates' rows of W_ih [G*H, I] and W_hh [G*H, H], one
// multiply-add per weight element.
OpCost recurrent_cost(bool ours_on_fp32_weights) {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* x = op.type("x");
    const ir::ValueType* ih = op.type("weight_ih");
    const ir::ValueType* hh = op.type("weight_hh");
    if (!x || !ih || !hh || x->rank != 3 || ih->rank != 2) return 0;
    return cost_extent(x->dims[0]) * cost_extent(x->dims[1]) * (cost_numel(*ih) + cost_numel(*hh));
  };
  cost.weights = {"weight_ih", "weight_hh", "weight_ih_back", "weight_hh_back"};
  // Our LSTM kernel makes one pass over the recurrent weight's rows per step, the gates activated
  // where they are computed: as fast as OpenVINO's LSTM sequence on fp32 weights
  // (docs/reports/performance.md, "Measurements behind code choices").
  cost.ours_on_fp32_weights = ours_on_fp32_weights;
  return cost;
}

}  // namespace

void register_recurrent_kernels(KernelRegistry& registry) {
  // fp16 x arrived with the iOS17 redefinitions (check_dtypes).
  constexpr DTypeSet kFloat32{DType::Float32};
  registry.add("lstm", kFloat32, make_lstm, 15, 16).cost = recurrent_cost(true);
  registry.add("lstm", kFloat, make_lstm, 17).cost = recurrent_cost(true);
  registry.add("gru", kFloat32, make_gru, 15, 16).cost = recurrent_cost(false);
  registry.add("gru", kFloat, make_gru, 17).cost = recurrent_cost(false);
  registry.add("rnn", kFloat32, make_rnn, 15, 16).cost = recurrent_cost(false);
  registry.add("rnn", kFloat, make_rnn, 17).cost = recurrent_cost(false);
}

}  // namespace coremlrt::ops
