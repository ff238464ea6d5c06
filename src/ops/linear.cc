// linear, matmul and einsum (coreml-format.md 5.4), plus the float helpers that the conv,
// attention and recurrent kernels share: one GEMM and fp16 <-> float staging.
//
// Float kernels compute in float whatever the storage type: fp16 operands are widened once,
// products are accumulated in float, and results are rounded to fp16 once on store.
#include <algorithm>
#include <cstring>

#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

// ---- Shared float helpers, declared again where used (conv, pool, normalization, attention,
// recurrent). They belong in util.h once that file is free to change. -----------------------

// C[M,N] = (accumulate ? C : 0) + A[M,K] * B[K,N]. A is read through element strides
// (a_row, a_col) so transposed views cost nothing; B and C are row-major with leading
// dimensions ldb and ldc. The loop order is i-k-j so the inner loop runs along contiguous
// rows of B and C; blocking over N and K keeps a block of B in cache across the rows of A.
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_row, int64_t a_col, const float* B,
          int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  if (!accumulate)
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
  constexpr int64_t kBlockN = 256, kBlockK = 128;
  for (int64_t n0 = 0; n0 < N; n0 += kBlockN) {
    const int64_t nn = std::min(kBlockN, N - n0);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t k_end = std::min(K, k0 + kBlockK);
      for (int64_t i = 0; i < M; ++i) {
        float* __restrict c = C + i * ldc + n0;
        const float* a = A + i * a_row;
        int64_t k = k0;
        // Four rows of B per pass: c is loaded and stored once per four products. The sum is
        // still evaluated left to right, so rounding is identical to one row at a time.
        for (; k + 4 <= k_end; k += 4) {
          const float a0 = a[k * a_col], a1 = a[(k + 1) * a_col], a2 = a[(k + 2) * a_col], a3 = a[(k + 3) * a_col];
          const float* __restrict b0 = B + k * ldb + n0;
          const float* __restrict b1 = b0 + ldb;
          const float* __restrict b2 = b1 + ldb;
          const float* __restrict b3 = b2 + ldb;
          for (int64_t j = 0; j < nn; ++j) c[j] = c[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
        for (; k < k_end; ++k) {
          const float av = a[k * a_col];
          const float* __restrict b = B + k * ldb + n0;
          for (int64_t j = 0; j < nn; ++j) c[j] += av * b[j];
        }
      }
    }
  }
}

// A copy of a float tensor (fp16, fp32 or fp64) as floats; used for constants at load.
std::vector<float> to_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::Float32: std::copy_n(t.ptr<float>(), out.size(), out.data()); break;
    case DType::Float16: std::copy_n(t.ptr<half>(), out.size(), out.data()); break;
    case DType::Float64: std::copy_n(t.ptr<double>(), out.size(), out.data()); break;
    default: fail("expected a floating-point tensor, got ", dtype_name(t.dtype));
  }
  return out;
}

// The elements of t as floats: t's own memory when fp32, else a converted copy in scratch.
const float* read_floats(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype == DType::Float32) return t.ptr<float>();
  scratch = to_floats(t);
  return scratch.data();
}

// Where to compute float results for `out`: its own memory when fp32, else scratch.
float* float_output(Tensor& out, std::vector<float>& scratch) {
  if (out.dtype == DType::Float32) return out.ptr<float>();
  scratch.resize(static_cast<size_t>(out.numel()));
  return scratch.data();
}

// Stores results computed in float_output's buffer into `out` (one rounding for fp16).
void commit_float_output(Tensor& out, const float* data) {
  if (data == out.data) return;
  const int64_t n = out.numel();
  switch (out.dtype) {
    case DType::Float32: std::memcpy(out.data, data, n * sizeof(float)); break;
    case DType::Float16: std::copy_n(data, n, out.ptr<half>()); break;
    default: fail("expected a floating-point output, got ", dtype_name(out.dtype));
  }
}

namespace {

bool float_dtype(DType d) { return d == DType::Float32 || d == DType::Float16; }

// Row-major transpose of `batches` matrices [rows, cols] -> [cols, rows].
void transpose_matrices(const float* src, float* dst, int64_t batches, int64_t rows, int64_t cols) {
  for (int64_t b = 0; b < batches; ++b, src += rows * cols, dst += rows * cols)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// Integer matmul of one [M,K] x [K,N] pair into c [M,N] (+ bias[N] if given). Unsigned
// arithmetic wraps modulo 2^32, which gives the two's-complement int32 result without
// signed-overflow undefined behaviour.
void int_matmul(int64_t M, int64_t N, int64_t K, const int32_t* a, int64_t a_row, int64_t a_col, const int32_t* b,
                int64_t b_row, int64_t b_col, const int32_t* bias, int32_t* c) {
  std::vector<uint32_t> acc(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) acc[j] = bias ? static_cast<uint32_t>(bias[j]) : 0u;
    for (int64_t k = 0; k < K; ++k) {
      const uint32_t av = static_cast<uint32_t>(a[i * a_row + k * a_col]);
      for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<uint32_t>(b[k * b_row + j * b_col]);
    }
    for (int64_t j = 0; j < N; ++j) c[i * N + j] = static_cast<int32_t>(acc[j]);
  }
}

std::unique_ptr<Kernel> make_linear(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dx = b.input_type("x").dtype;
  const DType dout = b.output_type(0).dtype;
  b.check(dout == dx, "output dtype ", dtype_name(dout), " differs from x's ", dtype_name(dx));
  b.check(b.is_constant("weight"), "weight must be a compile-time constant");
  const Tensor& w = b.constant("weight")->tensor;
  b.check(w.rank() == 2, "weight must be rank 2 [D_out, D_in], got ", shape_str(w.shape));
  const int64_t d_out = w.shape[0], d_in = w.shape[1];
  const bool has_bias = b.has("bias");
  if (has_bias) b.check(b.is_constant("bias"), "bias must be a compile-time constant");
  const Tensor* bias = has_bias ? &b.constant("bias")->tensor : nullptr;
  if (bias) b.check(bias->numel() == d_out, "bias has ", bias->numel(), " elements, expected D_out = ", d_out);

  if (dx == DType::Int32) {
    b.check(w.dtype == DType::Int32 && (!bias || bias->dtype == DType::Int32), "int32 x needs int32 weight and bias");
    std::vector<int32_t> wv(w.ptr<int32_t>(), w.ptr<int32_t>() + w.numel());
    std::vector<int32_t> bv = bias ? std::vector<int32_t>(bias->ptr<int32_t>(), bias->ptr<int32_t>() + d_out)
                                   : std::vector<int32_t>(static_cast<size_t>(d_out), 0);
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& tx = ctx.input(x);
      if (tx.rank() < 1 || tx.shape.back() != d_in) ctx.fail("x ", shape_str(tx.shape), " must end in D_in = ", d_in);
      Shape shape = tx.shape;
      shape.back() = d_out;
      Tensor& out = ctx.allocate_output(0, DType::Int32, shape);
      const int64_t rows = tx.numel() / std::max<int64_t>(d_in, 1);
      int_matmul(rows, d_out, d_in, tx.ptr<int32_t>(), d_in, 1, wv.data(), 1, d_in, bv.data(), out.ptr<int32_t>());
    });
  }
  b.check(float_dtype(dx), "unsupported x dtype ", dtype_name(dx));
  b.check(is_float(w.dtype) && (!bias || is_float(bias->dtype)), "weight and bias must be floating point");

  // Weight prepared once as W^T [D_in, D_out] in float: the B operand of the GEMM.
  std::vector<float> wt(static_cast<size_t>(d_in * d_out));
  const std::vector<float> wf = to_floats(w);
  transpose_matrices(wf.data(), wt.data(), 1, d_out, d_in);
  std::vector<float> bv = bias ? to_floats(*bias) : std::vector<float>(static_cast<size_t>(d_out), 0.0f);
  return make_kernel([x, d_in, d_out, wt = std::move(wt), bv = std::move(bv)](KernelContext& ctx) {
    const Tensor& tx = ctx.input(x);
    if (tx.rank() < 1 || tx.shape.back() != d_in) ctx.fail("x ", shape_str(tx.shape), " must end in D_in = ", d_in);
    Shape shape = tx.shape;
    shape.back() = d_out;
    Tensor& out = ctx.allocate_output(0, tx.dtype, shape);
    std::vector<float> xs, os;
    const float* xp = read_floats(tx, xs);
    float* op = float_output(out, os);
    const int64_t rows = tx.numel() / std::max<int64_t>(d_in, 1);
    for (int64_t r = 0; r < rows; ++r) std::copy(bv.begin(), bv.end(), op + r * d_out);
    gemm(rows, d_out, d_in, xp, d_in, 1, wt.data(), d_out, op, d_out, true);
    commit_float_output(out, op);
  });
}

std::unique_ptr<Kernel> make_matmul(KernelBuilder& b) {
  const int x = b.input("x"), y = b.input("y");
  const bool tx = b.const_bool("transpose_x", false), ty = b.const_bool("transpose_y", false);
  const DType dx = b.input_type("x").dtype, dy = b.input_type("y").dtype, dout = b.output_type(0).dtype;
  const bool x_const = b.is_constant("x"), y_const = b.is_constant("y");
  if (dx == DType::Int32 || dy == DType::Int32) {
    b.check(dx == dy && dout == dx, "int32 matmul needs int32 x, y and output");
  } else {
    b.check(float_dtype(dx) && float_dtype(dy) && float_dtype(dout), "x, y and output must be fp16 or fp32, got ",
            dtype_name(dx), ", ", dtype_name(dy), " and ", dtype_name(dout));
    // iOS17 allows a const operand of another dtype; the output keeps the declared dtype.
    b.check(dx == dy || (b.ios_version() >= 17 && (x_const || y_const)), "x is ", dtype_name(dx), " but y is ",
            dtype_name(dy));
  }
  // A constant float y is widened (and transposed to [.., K, N]) once here.
  const bool prep_y = y_const && dy != DType::Int32;
  std::vector<float> yf;
  Shape y_shape;
  if (prep_y) {
    const Tensor& t = b.constant("y")->tensor;
    yf = to_floats(t);
    y_shape = t.shape;
    if (ty) {
      b.check(t.rank() >= 2, "transpose_y needs y of rank >= 2");
      const int64_t r = y_shape[y_shape.size() - 2], c = y_shape.back();
      std::vector<float> tmp(yf.size());
      transpose_matrices(yf.data(), tmp.data(), t.numel() / std::max<int64_t>(r * c, 1), r, c);
      yf.swap(tmp);
      std::swap(y_shape[y_shape.size() - 2], y_shape.back());
    }
  }
  return make_kernel([=, yf = std::move(yf)](KernelContext& ctx) {
    const Tensor& txs = ctx.input(x);
    const Tensor& tys = ctx.input(y);
    const bool y_t = ty && !prep_y;  // still to transpose at run time
    Shape xs = txs.shape, ys = prep_y ? y_shape : tys.shape;
    if (xs.empty() || ys.empty()) ctx.fail("x and y must be at least 1-D");
    if ((tx && xs.size() == 1) || (ty && tys.rank() == 1)) ctx.fail("transpose is not allowed on a 1-D operand");
    const bool x1 = xs.size() == 1, y1 = ys.size() == 1;
    if (x1) xs.insert(xs.begin(), 1);
    if (y1) ys.push_back(1);
    const size_t rx = xs.size(), ry = ys.size();
    const int64_t M = tx ? xs[rx - 1] : xs[rx - 2], K = tx ? xs[rx - 2] : xs[rx - 1];
    const int64_t Ky = y_t ? ys[ry - 1] : ys[ry - 2], N = y_t ? ys[ry - 2] : ys[ry - 1];
    if (K != Ky) ctx.fail("inner dimensions differ: x ", shape_str(txs.shape), ", y ", shape_str(tys.shape));
    const Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
    const Shape batch = broadcast_shapes(bx, by);
    Shape out_shape = batch;
    if (!x1) out_shape.push_back(M);
    if (!y1) out_shape.push_back(N);
    Tensor& out = ctx.allocate_output(0, txs.dtype == DType::Int32 ? DType::Int32 : dout, out_shape);
    if (out.numel() == 0) return;
    auto sx = broadcast_strides(bx, batch), sy = broadcast_strides(by, batch);
    for (auto& s : sx) s *= M * K;
    for (auto& s : sy) s *= K * N;
    // Element strides of one x matrix read as [M, K].
    const int64_t a_row = tx ? 1 : K, a_col = tx ? M : 1;

    if (txs.dtype == DType::Int32) {
      const int32_t* xp = txs.ptr<int32_t>();
      const int32_t* yp = tys.ptr<int32_t>();
      const int64_t b_row = y_t ? 1 : N, b_col = y_t ? K : 1;
      for_each_broadcast(batch, sx, sy, [&](int64_t i, int64_t ox, int64_t oy) {
        int_matmul(M, N, K, xp + ox, a_row, a_col, yp + oy, b_row, b_col, nullptr, out.ptr<int32_t>() + i * M * N);
      });
      return;
    }
    std::vector<float> xs_buf, ys_buf, yt_buf, os;
    const float* xp = read_floats(txs, xs_buf);
    const float* yp = prep_y ? yf.data() : read_floats(tys, ys_buf);
    if (y_t) {  // GEMM wants B as row-major [K, N]
      yt_buf.resize(static_cast<size_t>(tys.numel()));
      transpose_matrices(yp, yt_buf.data(), tys.numel() / std::max<int64_t>(K * N, 1), N, K);
      yp = yt_buf.data();
    }
    float* op = float_output(out, os);
    if (shape_numel(by) == 1 && !tx) {
      // One shared y: all x rows form a single [batch*M, K] operand.
      gemm(shape_numel(batch) * M, N, K, xp, K, 1, yp, N, op, N, false);
    } else {
      for_each_broadcast(batch, sx, sy, [&](int64_t i, int64_t ox, int64_t oy) {
        gemm(M, N, K, xp + ox, a_row, a_col, yp + oy, N, op + i * M * N, N, false);
      });
    }
    commit_float_output(out, op);
  });
}

// einsum supports the two patterns Core ML defines, "nchw,nwhu->nchu" and "chw,whr->chr"
// under any lettering: out[n,c,h,u] = sum_w a[n,c,h,w] * b[n,w,h,u], with n and h broadcast.
std::unique_ptr<Kernel> make_einsum(KernelBuilder& b) {
  const std::vector<int> values = b.variadic_input("values");
  b.check(values.size() == 2, "expects 2 input tensors, got ", values.size());
  std::string eq = b.const_string("equation");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t comma = eq.find(','), arrow = eq.find("->");
  b.check(comma != std::string::npos && arrow != std::string::npos && comma < arrow, "malformed equation '", eq, "'");
  const std::string ea = eq.substr(0, comma), eb = eq.substr(comma + 1, arrow - comma - 1), eo = eq.substr(arrow + 2);
  const size_t rank = ea.size();
  bool ok = (rank == 3 || rank == 4) && eb.size() == rank && eo.size() == rank;
  if (ok) {
    const size_t o = rank - 3;  // offset of c: letters are [n] c h w / [n] w h u / [n] c h u
    const char c = ea[o], h = ea[o + 1], w = ea[o + 2], u = eb[o + 2];
    ok = std::string(ea.begin(), ea.begin() + o) == eb.substr(0, o) && eb.substr(0, o) == eo.substr(0, o) &&
         eb[o] == w && eb[o + 1] == h && eo[o] == c && eo[o + 1] == h && eo[o + 2] == u;
    std::string letters = ea + u;
    std::sort(letters.begin(), letters.end());
    ok = ok && std::adjacent_find(letters.begin(), letters.end()) == letters.end();
  }
  b.check(ok, "unsupported equation '", eq, "'; Core ML defines only \"nchw,nwhu->nchu\" and \"chw,whr->chr\"");
  const int ia = values[0], ib = values[1];
  return make_kernel([ia, ib, rank](KernelContext& ctx) {
    const Tensor& ta = ctx.input(ia);
    const Tensor& tb = ctx.input(ib);
    if (static_cast<size_t>(ta.rank()) != rank || static_cast<size_t>(tb.rank()) != rank)
      ctx.fail("inputs must be rank ", rank, ", got ", shape_str(ta.shape), " and ", shape_str(tb.shape));
    if (ta.dtype != tb.dtype) ctx.fail("inputs must share a dtype");
    // View both as rank 4 (n = 1 for rank 3).
    Shape sa = ta.shape, sb = tb.shape;
    if (rank == 3) sa.insert(sa.begin(), 1), sb.insert(sb.begin(), 1);
    const int64_t C = sa[1], W = sa[3], U = sb[3];
    auto bdim = [&](int64_t p, int64_t q) {
      if (p != q && p != 1 && q != 1) ctx.fail("dims ", p, " and ", q, " do not broadcast");
      return std::max(p, q);
    };
    if (sb[1] != W) ctx.fail("contracted dims differ: ", shape_str(ta.shape), " and ", shape_str(tb.shape));
    const int64_t Nn = bdim(sa[0], sb[0]), H = bdim(sa[2], sb[2]);
    Shape out_shape = {Nn, C, H, U};
    if (rank == 3) out_shape.erase(out_shape.begin());
    Tensor& out = ctx.allocate_output(0, ta.dtype, out_shape);
    std::vector<float> abuf, bbuf, obuf;
    const float* a = read_floats(ta, abuf);
    const float* bp = read_floats(tb, bbuf);
    float* o = float_output(out, obuf);
    const auto st_a = contiguous_strides(sa), st_b = contiguous_strides(sb);
    for (int64_t n = 0; n < Nn; ++n)
      for (int64_t h = 0; h < H; ++h) {
        // a[n, :, h, :] is [C, W] with row stride st_a[1]; b[n, :, h, :] is [W, U] with row stride st_b[1].
        const float* pa = a + (sa[0] == 1 ? 0 : n) * st_a[0] + (sa[2] == 1 ? 0 : h) * st_a[2];
        const float* pb = bp + (sb[0] == 1 ? 0 : n) * st_b[0] + (sb[2] == 1 ? 0 : h) * st_b[2];
        gemm(C, U, W, pa, st_a[1], 1, pb, st_b[1], o + (n * C * H + h) * U, H * U, false);
      }
    commit_float_output(out, o);
  });
}

}  // namespace

void register_linear_kernels(KernelRegistry& registry) {
  registry.add("linear", make_linear);
  registry.add("matmul", make_matmul);
  registry.add("einsum", make_einsum);
}

}  // namespace coremlrt::ops
