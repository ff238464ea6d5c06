// linear, matmul and einsum (docs/design/coreml-format.md, "Linear algebra").
//
// Float kernels compute in float whatever the storage type, through the shared GEMM
// (gemm.h), which reads every operand in place: a constant weight stays in its mapping of
// weight.bin, fp16 or fp32, and is never copied at load. Products are accumulated in float
// and results are rounded to fp16 once, on store.
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "ops/gemm.h"
#include "ops/register.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

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

// A constant parameter of `rank` kept packed (src/ops/packed_weight.h) that the GEMM can read
// by rows; nullptr for any other (which constant() then gives decoded).
std::shared_ptr<const PackedMatrix> packed_weight(const KernelBuilder& b, const std::string& param, int64_t rank) {
  const ir::ConstValue* stored = b.stored_constant(param);
  if (!stored || !stored->packed || static_cast<int64_t>(stored->packed->shape.size()) != rank ||
      !PackedMatrix::readable(*stored->packed))
    return nullptr;
  return std::make_shared<PackedMatrix>(stored->packed);
}

// float bias values of D_out entries (zeros without a bias).
std::vector<float> float_bias(KernelBuilder& b, int64_t d_out) {
  std::vector<float> bv(static_cast<size_t>(d_out), 0.0f);
  if (!b.has("bias")) return bv;
  b.check(b.is_constant("bias"), "bias must be a compile-time constant");
  const Tensor& bias = b.constant("bias")->tensor;
  b.check(bias.numel() == d_out, "bias has ", bias.numel(), " elements, expected D_out = ", d_out);
  b.check(is_float(bias.dtype) || bias.dtype == DType::Int32, "bias must be fp16, fp32 or int32, got ",
          dtype_name(bias.dtype));
  b.check(b.ios_version() >= 17 || is_float(bias.dtype), "bias must be floating point before iOS17");
  const Tensor widened = matrix_source(bias);
  return widened.dtype == DType::Float32 ? std::vector<float>(widened.ptr<float>(), widened.ptr<float>() + d_out)
                                         : to_floats(widened);
}

// y = x W^T + b into output 0, x [..., D_in] from input x, W^T [D_in, D_out] read through
// `weight_t` (a dense weight with swapped strides, or a packed one decoded as the GEMM reads it).
void linear_into(KernelContext& ctx, int x, int64_t d_in, int64_t d_out, const std::vector<float>& bias,
                 const MatrixView& weight_t) {
  const Tensor& tx = ctx.input(x);
  if (tx.rank() < 1 || tx.shape.back() != d_in) ctx.fail("x ", shape_str(tx.shape), " must end in D_in = ", d_in);
  Shape shape = tx.shape;
  shape.back() = d_out;
  Tensor& out = ctx.allocate_output(0, tx.dtype, shape);
  std::vector<float> os;
  float* op = float_output(out, os);
  const int64_t rows = tx.numel() / std::max<int64_t>(d_in, 1);
  for (int64_t r = 0; r < rows; ++r) std::copy(bias.begin(), bias.end(), op + r * d_out);
  gemm(rows, d_out, d_in, matrix_view(tx, 0, d_in), weight_t, op, d_out, true);
  commit_float_output(out, op);
}

// y = x W^T + b for a packed W [D_out, D_in], decoded block by block as the GEMM reads it.
std::unique_ptr<Kernel> linear_packed(KernelBuilder& b, int x, std::shared_ptr<const PackedMatrix> weight) {
  const int64_t d_out = weight->rows(), d_in = weight->cols();
  std::vector<float> bv = float_bias(b, d_out);
  return make_kernel([x, d_in, d_out, weight, bv = std::move(bv)](KernelContext& ctx) {
    linear_into(ctx, x, d_in, d_out, bv, MatrixView(*weight).transposed());
  });
}

std::unique_ptr<Kernel> make_linear(KernelBuilder& b) {
  const int x = b.input("x");
  const DType dx = b.input_type("x").dtype;
  const DType dout = b.output_type(0).dtype;
  b.check(dout == dx, "output dtype ", dtype_name(dout), " differs from x's ", dtype_name(dx));
  b.check(b.is_constant("weight"), "weight must be a compile-time constant");
  if (std::shared_ptr<const PackedMatrix> packed = packed_weight(b, "weight", 2); packed && is_fp32_or_fp16(dx))
    return linear_packed(b, x, std::move(packed));
  const Tensor& w = b.constant("weight")->tensor;
  b.check(w.rank() == 2, "weight must be rank 2 [D_out, D_in], got ", shape_str(w.shape));
  const int64_t d_out = w.shape[0], d_in = w.shape[1];
  const bool has_bias = b.has("bias");
  if (has_bias) b.check(b.is_constant("bias"), "bias must be a compile-time constant");
  const Tensor* bias = has_bias ? &b.constant("bias")->tensor : nullptr;
  if (bias) b.check(bias->numel() == d_out, "bias has ", bias->numel(), " elements, expected D_out = ", d_out);

  if (dx == DType::Int32) {
    b.check(w.dtype == DType::Int32 && (!bias || bias->dtype == DType::Int32), "int32 x needs int32 weight and bias");
    std::vector<int32_t> bv = bias ? std::vector<int32_t>(bias->ptr<int32_t>(), bias->ptr<int32_t>() + d_out)
                                   : std::vector<int32_t>(static_cast<size_t>(d_out), 0);
    // The weight tensor is captured (not its elements), so it is read where it lies.
    return make_kernel([x, d_in, d_out, w, bv = std::move(bv)](KernelContext& ctx) {
      const Tensor& tx = ctx.input(x);
      if (tx.rank() < 1 || tx.shape.back() != d_in) ctx.fail("x ", shape_str(tx.shape), " must end in D_in = ", d_in);
      Shape shape = tx.shape;
      shape.back() = d_out;
      Tensor& out = ctx.allocate_output(0, DType::Int32, shape);
      const int64_t rows = tx.numel() / std::max<int64_t>(d_in, 1);
      int_matmul(rows, d_out, d_in, tx.ptr<int32_t>(), d_in, 1, w.ptr<int32_t>(), 1, d_in, bv.data(),
                 out.ptr<int32_t>());
    });
  }
  b.check(is_fp32_or_fp16(dx), "unsupported x dtype ", dtype_name(dx));
  // iOS17 lets weight and bias have another dtype than x, int32 included.
  const auto float_or_int = [](DType d) { return is_float(d) || d == DType::Int32; };
  b.check(float_or_int(w.dtype) && (!bias || float_or_int(bias->dtype)), "weight and bias must be fp16, fp32 or int32, got ",
          dtype_name(w.dtype), bias ? " and " : "", bias ? dtype_name(bias->dtype) : "");
  b.check(b.ios_version() >= 17 || (is_float(w.dtype) && (!bias || is_float(bias->dtype))),
          "weight and bias must be floating point before iOS17");

  // The weight is used as stored (fp16 or fp32, usually a view of weight.bin; an int32 one
  // is widened once here, like the small bias).
  const Tensor weight = matrix_source(w);
  std::vector<float> bv(static_cast<size_t>(d_out), 0.0f);
  if (bias) {
    const Tensor widened = matrix_source(*bias);
    bv = widened.dtype == DType::Float32 ? std::vector<float>(widened.ptr<float>(), widened.ptr<float>() + d_out)
                                         : to_floats(widened);
  }
  return make_kernel([x, d_in, d_out, weight, bv = std::move(bv)](KernelContext& ctx) {
    // W^T is W [D_out, D_in] read with swapped strides.
    linear_into(ctx, x, d_in, d_out, bv, matrix_view(weight, 0, 1, d_in));
  });
}

// x @ y for a packed constant y (y [K, N], or [N, K] with transpose_y) and x computed at run time.
std::unique_ptr<Kernel> matmul_packed(KernelBuilder& b, std::shared_ptr<const PackedMatrix> y) {
  const int x = b.input("x");
  const bool tx = b.const_bool("transpose_x", false), ty = b.const_bool("transpose_y", false);
  const DType dx = b.input_type("x").dtype;
  b.check(b.output_type(0).dtype == dx, "output dtype ", dtype_name(b.output_type(0).dtype), " differs from x's ",
          dtype_name(dx));
  const int64_t K = ty ? y->cols() : y->rows(), N = ty ? y->rows() : y->cols();
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& t = ctx.input(x);
    Shape xs = t.shape;
    if (xs.empty()) ctx.fail("x must be at least 1-D");
    if (tx && xs.size() == 1) ctx.fail("transpose is not allowed on a 1-D operand");
    const bool x1 = xs.size() == 1;
    if (x1) xs.insert(xs.begin(), 1);
    const size_t rx = xs.size();
    const int64_t M = tx ? xs[rx - 1] : xs[rx - 2], Kx = tx ? xs[rx - 2] : xs[rx - 1];
    if (Kx != K) ctx.fail("inner dimensions differ: x ", shape_str(t.shape), ", y ", shape_str(y->tensor().shape));
    Shape out_shape(xs.begin(), xs.end() - 2);
    const int64_t batch = shape_numel(out_shape);
    if (!x1) out_shape.push_back(M);
    out_shape.push_back(N);
    Tensor& out = ctx.allocate_output(0, t.dtype, out_shape);
    if (out.numel() == 0) return;
    std::vector<float> os;
    float* op = float_output(out, os);
    const MatrixView B = ty ? MatrixView(*y).transposed() : MatrixView(*y);
    if (!tx) {
      gemm(batch * M, N, K, matrix_view(t, 0, K), B, op, N, false);
    } else {
      for (int64_t i = 0; i < batch; ++i) gemm(M, N, K, matrix_view(t, i * M * K, 1, M), B, op + i * M * N, N, false);
    }
    commit_float_output(out, op);
  });
}

std::unique_ptr<Kernel> make_matmul(KernelBuilder& b) {
  if (b.is_constant("y") && !b.is_constant("x") && is_fp32_or_fp16(b.input_type("x").dtype))
    if (std::shared_ptr<const PackedMatrix> packed = packed_weight(b, "y", 2)) return matmul_packed(b, std::move(packed));
  const int x = b.input("x"), y = b.input("y");
  const bool tx = b.const_bool("transpose_x", false), ty = b.const_bool("transpose_y", false);
  const DType dx = b.input_type("x").dtype, dy = b.input_type("y").dtype, dout = b.output_type(0).dtype;
  const bool x_const = b.is_constant("x"), y_const = b.is_constant("y");
  const auto float_or_int = [](DType d) { return is_fp32_or_fp16(d) || d == DType::Int32; };
  const bool int_path = dx == DType::Int32 && dy == DType::Int32;
  if (int_path) {
    b.check(dout == DType::Int32, "int32 matmul needs an int32 output, got ", dtype_name(dout));
  } else {
    b.check(float_or_int(dx) && float_or_int(dy) && float_or_int(dout), "x, y and output must be fp16, fp32 or int32, got ",
            dtype_name(dx), ", ", dtype_name(dy), " and ", dtype_name(dout));
    // iOS17 allows a const operand of another dtype (int32 included); the output keeps the
    // declared dtype, the non-constant operand's. Such products are computed in float.
    b.check(dx == dy || (b.ios_version() >= 17 && (x_const || y_const)), "x is ", dtype_name(dx), " but y is ",
            dtype_name(dy));
  }
  // Both operands are read in place at run time, constant or not: a constant y (a weight)
  // is never widened or transposed into a copy, transpose flags just swap strides. Only an
  // int32 operand of a float product is widened: a constant once here, an input per call.
  std::optional<Tensor> x_widened, y_widened;
  if (!int_path && x_const && !is_fp32_or_fp16(dx)) x_widened = matrix_source(b.constant("x")->tensor);
  if (!int_path && y_const && !is_fp32_or_fp16(dy)) y_widened = matrix_source(b.constant("y")->tensor);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor& x_in = x_widened ? *x_widened : ctx.input(x);
    const Tensor& y_in = y_widened ? *y_widened : ctx.input(y);
    const Tensor x_float = int_path ? Tensor() : matrix_source(x_in), y_float = int_path ? Tensor() : matrix_source(y_in);
    const Tensor& txs = int_path ? x_in : x_float;
    const Tensor& tys = int_path ? y_in : y_float;
    Shape xs = txs.shape, ys = tys.shape;
    if (xs.empty() || ys.empty()) ctx.fail("x and y must be at least 1-D");
    if ((tx && xs.size() == 1) || (ty && ys.size() == 1)) ctx.fail("transpose is not allowed on a 1-D operand");
    const bool x1 = xs.size() == 1, y1 = ys.size() == 1;
    if (x1) xs.insert(xs.begin(), 1);
    if (y1) ys.push_back(1);
    const size_t rx = xs.size(), ry = ys.size();
    const int64_t M = tx ? xs[rx - 1] : xs[rx - 2], K = tx ? xs[rx - 2] : xs[rx - 1];
    const int64_t Ky = ty ? ys[ry - 1] : ys[ry - 2], N = ty ? ys[ry - 2] : ys[ry - 1];
    if (K != Ky) ctx.fail("inner dimensions differ: x ", shape_str(txs.shape), ", y ", shape_str(tys.shape));
    const Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
    const Shape batch = broadcast_shapes(bx, by);
    Shape out_shape = batch;
    if (!x1) out_shape.push_back(M);
    if (!y1) out_shape.push_back(N);
    Tensor& out = ctx.allocate_output(0, dout, out_shape);
    if (out.numel() == 0) return;
    auto sx = broadcast_strides(bx, batch), sy = broadcast_strides(by, batch);
    for (auto& s : sx) s *= M * K;
    for (auto& s : sy) s *= K * N;
    // Element strides of one x matrix read as [M, K] and of one y matrix read as [K, N].
    const int64_t a_row = tx ? 1 : K, a_col = tx ? M : 1;
    const int64_t b_row = ty ? 1 : N, b_col = ty ? K : 1;

    if (int_path) {
      const int32_t* xp = txs.ptr<int32_t>();
      const int32_t* yp = tys.ptr<int32_t>();
      for_each_broadcast(batch, sx, sy, [&](int64_t i, int64_t ox, int64_t oy) {
        int_matmul(M, N, K, xp + ox, a_row, a_col, yp + oy, b_row, b_col, nullptr, out.ptr<int32_t>() + i * M * N);
      });
      return;
    }
    std::vector<float> os;
    const bool int_out = out.dtype == DType::Int32;  // an int32 x times a constant float y
    if (int_out) os.resize(static_cast<size_t>(out.numel()));
    float* op = int_out ? os.data() : float_output(out, os);
    if (shape_numel(by) == 1 && !tx) {
      // One shared y: all x rows form a single [batch*M, K] operand.
      gemm(shape_numel(batch) * M, N, K, matrix_view(txs, 0, K), matrix_view(tys, 0, b_row, b_col), op, N, false);
    } else {
      std::vector<std::pair<int64_t, int64_t>> offsets;
      offsets.reserve(static_cast<size_t>(shape_numel(batch)));
      for_each_broadcast(batch, sx, sy, [&](int64_t, int64_t ox, int64_t oy) { offsets.emplace_back(ox, oy); });
      auto products = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const auto [ox, oy] = offsets[static_cast<size_t>(i)];
          gemm(M, N, K, matrix_view(txs, ox, a_row, a_col), matrix_view(tys, oy, b_row, b_col), op + i * M * N, N,
               false);
        }
      };
      gemm_each(static_cast<int64_t>(offsets.size()), M * N * K, products);
    }
    if (int_out) {
      int32_t* o = out.ptr<int32_t>();
      for (int64_t k = 0; k < out.numel(); ++k) o[k] = static_cast<int32_t>(std::nearbyint(op[k]));
      return;
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
    if (!is_fp32_or_fp16(ta.dtype)) ctx.fail("inputs must be fp16 or fp32, got ", dtype_name(ta.dtype));
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
    std::vector<float> obuf;
    float* o = float_output(out, obuf);
    const auto st_a = contiguous_strides(sa), st_b = contiguous_strides(sb);
    for (int64_t n = 0; n < Nn; ++n)
      for (int64_t h = 0; h < H; ++h) {
        // a[n, :, h, :] is [C, W] with row stride st_a[1]; b[n, :, h, :] is [W, U] with row stride st_b[1].
        const int64_t pa = (sa[0] == 1 ? 0 : n) * st_a[0] + (sa[2] == 1 ? 0 : h) * st_a[2];
        const int64_t pb = (sb[0] == 1 ? 0 : n) * st_b[0] + (sb[2] == 1 ? 0 : h) * st_b[2];
        gemm(C, U, W, matrix_view(ta, pa, st_a[1]), matrix_view(tb, pb, st_b[1]), o + (n * C * H + h) * U, H * U,
             false);
      }
    commit_float_output(out, o);
  });
}

// Each output element is a dot product over the reduced extent: the weight's K (linear's weight
// is [N, K]), or the last dim of matmul's x (its K, or the other dim when transposed). Rows: of x
// per product (matmul's batch dims not counted).
double first_output_elements(const CostReader& op) {
  return op.op().outputs.empty() ? 0 : cost_numel(op.op().outputs[0].type);
}

OpCost linear_cost() {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* w = op.type("weight");
    return w && w->rank == 2 ? first_output_elements(op) * cost_extent(w->dims[1]) : 0;
  };
  cost.matrix_rows = [](const CostReader& op) -> int64_t {
    const ir::ValueType* x = op.type("x");
    if (!x) return -1;
    if (x->dims.empty()) return 1;
    return static_cast<int64_t>(cost_numel(*x) / cost_extent(x->dims.back()));
  };
  cost.weights = {"weight"};
  return cost;
}

OpCost matmul_cost() {
  OpCost cost;
  cost.macs = [](const CostReader& op) -> double {
    const ir::ValueType* x = op.type("x");
    return x && x->rank >= 1 ? first_output_elements(op) * cost_extent(x->dims.back()) : 0;
  };
  cost.matrix_rows = [](const CostReader& op) -> int64_t {
    const ir::ValueType* x = op.type("x");
    if (!x) return -1;
    if (x->dims.size() <= 1) return 1;
    const bool transpose_x = op.flag("transpose_x");
    return static_cast<int64_t>(cost_extent(transpose_x ? x->dims.back() : x->dims[x->dims.size() - 2]));
  };
  cost.weights = {"y"};
  return cost;
}

}  // namespace

void register_linear_kernels(KernelRegistry& registry) {
  registry.add("linear", kFloatInt, make_linear).cost = linear_cost();
  registry.add("matmul", kFloatInt, make_matmul).cost = matmul_cost();
  registry.add("einsum", kFloat, make_einsum);
}

}  // namespace coremlrt::ops
