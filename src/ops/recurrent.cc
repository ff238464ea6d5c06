// rnn, gru and lstm (docs/design/coreml-format.md, "Recurrent layers"), computed in float with the state kept
// in float.
//
// Layout facts that differ from PyTorch: LSTM gate blocks are [i, f, o, z], GRU blocks are
// [r, o, z], and `bias` is the sum of the input and hidden biases. Output positions follow
// Core ML: a "reverse" layer emits its sequence in processing order (step k holds the state
// after reading x[s-1-k]); a bidirectional LSTM aligns the backward half with input time
// (as PyTorch does). Without output_sequence the output is the final state.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "ops/gemm.h"
#include "ops/register.h"
#include "ops/thread_pool.h"
#include "ops/util.h"
#include "ops/vector_math.h"

// On x86-64 (GCC) some functions below have versions for newer CPUs, as in ops/gemm.cc, and
// as there COREMLRT_GEMM_PORTABLE_ONLY (the TSan build: CMakeLists.txt) leaves only the plain
// code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_RECURRENT_X86_V3 1
#include <immintrin.h>
#endif

namespace coremlrt::ops {

namespace {

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

// ---- Dot products summed as gemm sums them, in fewer instructions.

#ifdef COREMLRT_RECURRENT_X86_V3
#define COREMLRT_RECURRENT_DOTS 1
// The kernels below compute C[r, j] += dot(A[r, :], W[j, :]) for rows of a row-major W whose
// length K is a multiple of 8, with each element summed exactly as gemm's x86-64-v3 and v4 dot
// forms sum it (dot_tile and dot_tile_pairs in ops/gemm.cc): eight lanes, each a chain of fused
// multiply-adds over its share of a block of kGemmDotBlockK, the lanes then added in order to 0, and
// that sum added to C, block after block. So their results are those of the gemm call they
// replace; they differ in adding the lanes of eight elements at once, after a transposition,
// where gemm adds them one element at a time.

// out += the lane sums of acc[0..8), lane j of the result summing acc[j].
[[gnu::target("avx"), gnu::always_inline]] inline void add_lane_sums(const __m256 (&acc)[8], __m256& out) {
  const __m256 t0 = _mm256_unpacklo_ps(acc[0], acc[1]), t1 = _mm256_unpackhi_ps(acc[0], acc[1]);
  const __m256 t2 = _mm256_unpacklo_ps(acc[2], acc[3]), t3 = _mm256_unpackhi_ps(acc[2], acc[3]);
  const __m256 t4 = _mm256_unpacklo_ps(acc[4], acc[5]), t5 = _mm256_unpackhi_ps(acc[4], acc[5]);
  const __m256 t6 = _mm256_unpacklo_ps(acc[6], acc[7]), t7 = _mm256_unpackhi_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  __m256 sum = _mm256_add_ps(_mm256_setzero_ps(), _mm256_permute2f128_ps(u0, u4, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u1, u5, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u2, u6, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u3, u7, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u0, u4, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u1, u5, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u2, u6, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u3, u7, 0x31));
  out = _mm256_add_ps(out, sum);
}

// The recurrent product of one block of hidden units for a single row of h:
// g[q*n + i] = x[q*H + i] + dot(h, w[(q*H + i) * H ...]) for the gates q < `gates` and units
// i < n (n and H multiples of 8), w pointing at the block's first row. One pass over all gates'
// rows instead of a gemm call per gate, whose set-up costs about as much as these small
// products. Reading W_hh is what bounds it, so eight lanes suffice.
__attribute__((target("arch=x86-64-v3"))) void gate_dots(const float* h, const float* w, int64_t H, int64_t n,
                                                        int64_t gates, const float* x, float* g) {
  for (int64_t q = 0; q < gates; ++q)
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      const float* rows = w + (q * H + i0) * H;
      __m256 out = _mm256_loadu_ps(x + q * H + i0);
      for (int64_t k0 = 0; k0 < H; k0 += kGemmDotBlockK) {
        const int64_t k1 = std::min(H, k0 + kGemmDotBlockK);
        __m256 acc[8];
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
        for (int64_t k = k0; k < k1; k += 8) {
          const __m256 a = _mm256_loadu_ps(h + k);
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(a, _mm256_loadu_ps(rows + r * H + k), acc[r]);
        }
        add_lane_sums(acc, out);
      }
      _mm256_storeu_ps(g + q * n + i0, out);
    }
}

// C[r, 0:8] += A[r, k0:k1] . W[0:8, k0:k1]^T for r < MR: each sixteen-lane accumulator holds
// two rows of W (as dot_tile_pairs does), so that CPUs with two 512-bit multiply-add units
// use both. (Halves are joined and split with __builtin_shufflevector: GCC 12's intrinsics for
// that start from an undefined register and draw -Wmaybe-uninitialized, ops/gemm.cc.)
template <int MR>
[[gnu::target("arch=x86-64-v4"), gnu::always_inline]] inline void project_tile(int64_t k0, int64_t k1, const float* A,
                                                                             int64_t lda, const float* W, int64_t ldw,
                                                                             float* C, int64_t ldc) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; k += 8) {
    __m512 w[4];
    for (int p = 0; p < 4; ++p) {
      const __m256 low = _mm256_loadu_ps(W + 2 * p * ldw + k), high = _mm256_loadu_ps(W + (2 * p + 1) * ldw + k);
      w[p] = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    }
    for (int r = 0; r < MR; ++r) {
      const __m256 row = _mm256_loadu_ps(A + r * lda + k);
      const __m512 a = __builtin_shufflevector(row, row, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
      for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_fmadd_ps(a, w[p], acc[r][p]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    __m256 halves[8];
    for (int p = 0; p < 4; ++p) {
      halves[2 * p] = __builtin_shufflevector(acc[r][p], acc[r][p], 0, 1, 2, 3, 4, 5, 6, 7);
      halves[2 * p + 1] = __builtin_shufflevector(acc[r][p], acc[r][p], 8, 9, 10, 11, 12, 13, 14, 15);
    }
    __m256 out = _mm256_loadu_ps(C + r * ldc);
    add_lane_sums(halves, out);
    _mm256_storeu_ps(C + r * ldc, out);
  }
}

// Prefetches the cache lines [first, last) from p on, into L1 (locality 3) or L2 (2).
template <int Locality>
[[gnu::always_inline]] inline void prefetch_lines(const char* p, int64_t first, int64_t last) {
  for (int64_t l = first; l < last; ++l) __builtin_prefetch(p + l * 64, 0, Locality);
}

// C[M, N] += A[M, K] . W[N, K]^T for N and K multiples of 8 and ldw == K (the input projection
// of all steps), in panels of eight rows of W. While a panel is used, the next one is fetched,
// and `ahead_bytes` from `ahead` on are fetched towards L2 (the recurrent weight that the steps
// read next): the products keep the core busy while memory delivers both. Without it, the
// first pass over each weight waits on memory, which costs about as much as five later steps.
__attribute__((target("arch=x86-64-v4"))) void project_dots(int64_t M, int64_t N, int64_t K, const float* A,
                                                           int64_t lda, const float* W, float* C, int64_t ldc,
                                                           const char* ahead, int64_t ahead_bytes) {
  const int64_t panels = N / 8, panel_lines = 8 * K * 4 / 64, ahead_lines = ahead_bytes / 64;
  const int64_t tiles = (M + 3) / 4;
  for (int64_t p = 0; p < panels; ++p) {
    const float* w = W + p * 8 * K;
    const char* next = reinterpret_cast<const char*>(w + 8 * K);
    const int64_t a0 = p * ahead_lines / panels, a1 = (p + 1) * ahead_lines / panels;
    for (int64_t k0 = 0; k0 < K; k0 += kGemmDotBlockK) {
      const int64_t k1 = std::min(K, k0 + kGemmDotBlockK);
      for (int64_t t = 0; t < tiles; ++t) {
        if (k0 == 0) {  // a share of the prefetches before each tile
          if (p + 1 < panels) prefetch_lines<3>(next, t * panel_lines / tiles, (t + 1) * panel_lines / tiles);
          prefetch_lines<2>(ahead, a0 + t * (a1 - a0) / tiles, a0 + (t + 1) * (a1 - a0) / tiles);
        }
        const int64_t i = 4 * t;
        if (i + 4 <= M) {
          project_tile<4>(k0, k1, A + i * lda, lda, w, K, C + i * ldc + p * 8, ldc);
        } else {
          for (int64_t r = i; r < M; ++r) project_tile<1>(k0, k1, A + r * lda, lda, w, K, C + r * ldc + p * 8, ldc);
        }
      }
    }
  }
}

// Whether gemm takes its fused multiply-add versions on this CPU, which the kernels above
// reproduce; project_dots also needs x86-64-v4.
bool have_gate_dots() {
  static const bool v3 = __builtin_cpu_supports("x86-64-v3");
  return v3;
}
bool have_project_dots() {
  static const bool v4 = __builtin_cpu_supports("x86-64-v4");
  return v4;
}
#endif

// ---- Time steps split into blocks that run in parallel.

// The blocks of the steps of one sequence, shared by the threads that run them. One pool loop
// serves the whole sequence rather than one per step: each thread claims blocks of the current
// step from atomic cursors, and the thread that finishes a step's last block opens the next
// step. A thread waits only for blocks another thread has claimed and is running, so a pool
// thread that joins late, or never, just leaves more blocks to the others (as
// ops/thread_pool.h requires of loops).
//
// Blocks are split into one range per part. A part claims from its own range first: from the
// front on even steps and from the back on odd ones, so that it starts on the weight rows it
// read last; then it takes what is left of the other ranges from their other end.
class StepLoop {
 public:
  StepLoop(int64_t steps, int64_t blocks, int parts)
      : steps_(steps), blocks_(blocks), parts_(parts), cursors_(new Cursor[static_cast<size_t>(parts)]) {
    open(0);
  }

  // Runs body(part, k, b) for the blocks this thread claims, from the current step to the last.
  template <class Body>
  void take_part(int part, Body& body) {
    for (int64_t k = ready_.load(std::memory_order_acquire); k < steps_;) {
      int64_t ran = 0;
      try {
        for (int i = 0; i < parts_; ++i) {
          const int range = (part + i) % parts_;
          const bool from_front = (i == 0) == (k % 2 == 0);
          for (int64_t b = 0; claim(range, k, from_front, b); ++ran) body(part, k, b);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
        return;
      }
      if (ran > 0 && finished_.fetch_add(ran, std::memory_order_acq_rel) + ran == (k + 1) * blocks_) {
        open(k + 1);
        ready_.store(k + 1, std::memory_order_release);
      }
      ++k;
      // Spin: a step takes microseconds, far less than a sleep and a wake-up. Yielding now
      // and then lets the thread waited for run where threads outnumber cores.
      for (int polls = 1; ready_.load(std::memory_order_acquire) < k; ++polls) {
        if (failed_.load(std::memory_order_relaxed)) return;
        if (polls % 256 == 0) std::this_thread::yield();
        else cpu_relax();
      }
    }
  }

  void rethrow() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // A range's unclaimed blocks [front, back) in step `step`: step << 32 | front << 16 | back.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> bits{0};
  };

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void open(int64_t k) {
    for (int r = 0; r < parts_; ++r) {
      const uint64_t front = static_cast<uint64_t>(r * blocks_ / parts_);
      const uint64_t back = static_cast<uint64_t>((r + 1) * blocks_ / parts_);
      cursors_[r].bits.store(static_cast<uint64_t>(static_cast<uint32_t>(k)) << 32 | front << 16 | back,
                             std::memory_order_relaxed);
    }
  }

  bool claim(int range, int64_t k, bool from_front, int64_t& block) {
    std::atomic<uint64_t>& cursor = cursors_[range].bits;
    uint64_t bits = cursor.load(std::memory_order_relaxed);
    for (;;) {
      // A cursor already opened for a later step means that step k is all done.
      if (bits >> 32 != static_cast<uint32_t>(k)) return false;
      const int64_t front = static_cast<int64_t>(bits >> 16 & 0xffff), back = static_cast<int64_t>(bits & 0xffff);
      if (front >= back) return false;
      const uint64_t next = from_front ? bits + (uint64_t{1} << 16) : bits - 1;
      if (cursor.compare_exchange_weak(bits, next, std::memory_order_relaxed)) {
        block = from_front ? front : back - 1;
        return true;
      }
    }
  }

  const int64_t steps_, blocks_;
  const int parts_;
  std::unique_ptr<Cursor[]> cursors_;
  alignas(64) std::atomic<int64_t> finished_{0};  // blocks run, over all steps
  alignas(64) std::atomic<int64_t> ready_{0};     // the step whose cursors are open
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The most blocks a step may have (StepLoop's cursors count them in 16 bits).
constexpr int64_t kMaxBlocks = 1 << 15;

// Runs body(part, k, b) for every step k in [0, steps) and block b in [0, blocks), all blocks
// of step k before any of step k+1, on up to `parts` threads; `part` tells apart the threads
// running at once (for their scratch buffers). Since the blocks of a step are independent, the
// results do not depend on which thread runs which.
template <class Body>
void for_each_step(int64_t steps, int64_t blocks, int parts, Body&& body) {
  if (parts <= 1) {  // in StepLoop's order
    for (int64_t k = 0; k < steps; ++k)
      for (int64_t i = 0; i < blocks; ++i) body(0, k, k % 2 == 0 ? i : blocks - 1 - i);
    return;
  }
  StepLoop loop(steps, blocks, parts);
  parallel_for(parts, 1, [&](int64_t begin, int64_t end) {
    // A product started inside a block stays on this thread (the others are busy here).
    ThreadLimit single(1);
    for (int64_t part = begin; part < end; ++part) loop.take_part(static_cast<int>(part), body);
  });
  loop.rethrow();
}

// Constant weights of one direction. W_ih [G*H, I] and W_hh [G*H, H] are the constant tensors
// themselves (views of weight.bin), read in place: x @ W_ih^T and each step's h @ W_hh^T are
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
  std::vector<std::vector<float>> states;
  for (int index : state_inputs) {
    const Tensor& t = ctx.input(index);
    if (t.numel() != batch * dirs * hidden)
      ctx.fail("initial state ", shape_str(t.shape), " must be [", batch, ", ", dirs * hidden, "]");
    std::vector<float> scratch;
    const float* p = read_floats(t, scratch);
    states.emplace_back(p, p + t.numel());
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

}  // namespace

void register_recurrent_kernels(KernelRegistry& registry) {
  // fp16 x arrived with the iOS17 redefinitions (check_dtypes).
  constexpr DTypeSet kFloat32{DType::Float32};
  registry.add("lstm", kFloat32, make_lstm, 15, 16);
  registry.add("lstm", kFloat, make_lstm, 17);
  registry.add("gru", kFloat32, make_gru, 15, 16);
  registry.add("gru", kFloat, make_gru, 17);
  registry.add("rnn", kFloat32, make_rnn, 15, 16);
  registry.add("rnn", kFloat, make_rnn, 17);
}

}  // namespace coremlrt::ops
