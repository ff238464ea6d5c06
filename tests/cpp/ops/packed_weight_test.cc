// Decoders of packed constants (ops/packed_weight.h) against the element-by-element decoder,
// for every form the planner keeps packed, odd sizes and windows, fp16 and fp32 values, the
// AVX-512 loops and the portable ones; and the GEMM reading a packed weight against the GEMM
// reading the same values stored dense (bit for bit: the same products in the same order).
// That the element-by-element decoder computes what the constexpr_* kernels fold is checked
// end to end by tests/python/ops/test_packed_weights.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coremlrt/error.h"
#include "ops/gemm.h"
#include "ops/packed_codes.h"
#include "ops/packed_codes_avx512.h"
#include "ops/packed_weight.h"

namespace coremlrt::ops {
namespace {

std::mt19937 rng(7);

// `codes` bit-packed LSB-first, `bits` each.
Tensor pack_bits(const std::vector<uint32_t>& codes, int bits) {
  Tensor out = Tensor::empty(DType::UInt8, {static_cast<int64_t>((codes.size() * bits + 7) / 8)});
  std::memset(out.data, 0, out.nbytes());
  for (size_t i = 0; i < codes.size(); ++i)
    for (int b = 0; b < bits; ++b)
      if ((codes[i] >> b) & 1u) out.ptr<uint8_t>()[(i * bits + b) / 8] |= static_cast<uint8_t>(1u << ((i * bits + b) % 8));
  return out;
}

std::vector<uint32_t> random_codes(int64_t n, int bits) {
  std::vector<uint32_t> out(static_cast<size_t>(n));
  for (auto& c : out) c = rng() & ((1u << bits) - 1u);
  return out;
}

Tensor random_floats(DType dtype, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(dtype, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::Float16) t.ptr<half>()[i] = static_cast<half>(dist(rng));
    else t.ptr<float>()[i] = dist(rng);
  }
  return t;
}

// A plain (one element per entry) array of `dtype` with random integer values in [lo, hi].
ir::PackedArray plain_ints(DType dtype, int64_t n, int lo, int hi) {
  Tensor t = Tensor::empty(dtype == DType::Int8 ? DType::Int8 : DType::UInt8, {n});
  std::uniform_int_distribution<int> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.ptr<uint8_t>()[i] = static_cast<uint8_t>(dist(rng));
  t.dtype = dtype;
  return {t, dtype, 0, n};
}

ir::PackedArray packed_ints(DType dtype, int bits, int64_t n) {
  return {pack_bits(random_codes(n, bits), bits), dtype, bits, n};
}

struct Case {
  std::string name;
  ir::PackedTensor tensor;
};

ir::PackedTensor base(DType dtype, Shape shape, Shape groups) {
  ir::PackedTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.groups = std::move(groups);
  return t;
}

ir::PackedTensor lut(DType dtype, Shape shape, Shape groups, int bits, bool plain) {
  ir::PackedTensor t = base(dtype, shape, groups);
  const int64_t n = shape_numel(t.shape);
  t.map = ir::CodeMap::kLut;
  t.palettes = int64_t{1} << bits;
  t.codes = plain ? plain_ints(DType::UInt8, n, 0, static_cast<int>(t.palettes - 1)) : packed_ints(DType::UInt4, bits, n);
  if (!plain) t.codes.dtype = bits == 4 ? DType::UInt4 : bits == 8 ? DType::UInt8 : DType::UInt2;
  t.table = random_floats(dtype, t.group_count() * t.palettes, -2, 2);
  return t;
}

ir::PackedTensor shift_scale(DType dtype, Shape shape, Shape groups, DType codes, bool offset, DType offset_dtype,
                             ir::CodeMap map = ir::CodeMap::kShiftScale) {
  ir::PackedTensor t = base(dtype, shape, groups);
  const int64_t n = shape_numel(t.shape), g = t.group_count();
  t.map = map;
  if (codes == DType::Int4 || codes == DType::UInt4) t.codes = packed_ints(codes, 4, n);
  else if (codes == DType::Float16) t.codes = {random_floats(DType::Float16, n, -40, 40), DType::Float16, 0, n};
  else t.codes = plain_ints(codes, n, codes == DType::Int8 ? -128 : 0, codes == DType::Int8 ? 127 : 255);
  t.scale = random_floats(dtype, g, 0.001f, 0.05f);
  if (offset) {
    if (offset_dtype == DType::Float16 || offset_dtype == DType::Float32) t.offset = {random_floats(offset_dtype, g, -5, 5), offset_dtype, 0, g};
    else if (offset_dtype == DType::Int4 || offset_dtype == DType::UInt4) t.offset = packed_ints(offset_dtype, 4, g);
    else t.offset = plain_ints(offset_dtype, g, offset_dtype == DType::Int8 ? -128 : 0, 127);
  }
  return t;
}

// Makes `t` sparse: its codes become those of the positions a random mask keeps.
ir::PackedTensor sparse(ir::PackedTensor dense_codes, double keep) {
  const int64_t n = shape_numel(dense_codes.shape);
  std::vector<uint32_t> mask(static_cast<size_t>(n));
  std::bernoulli_distribution coin(keep);
  int64_t set = 0;
  for (auto& m : mask) set += (m = coin(rng));
  ir::PackedTensor t = dense_codes;
  t.mask = pack_bits(mask, 1);
  t.nonzero = set;
  ir::PackedArray& c = t.codes;
  c.count = set;
  if (c.bits) c.data = pack_bits(random_codes(set, c.bits), c.bits);
  else if (c.dtype == DType::Float16 || c.dtype == DType::Float32) c.data = random_floats(c.dtype, set, -1, 1);
  else c.data = plain_ints(c.dtype, set, 0, static_cast<int>(dense_codes.palettes ? dense_codes.palettes - 1 : 100)).data;
  return t;
}

ir::PackedTensor sparse_floats(DType dtype, Shape shape, double keep) {
  ir::PackedTensor t = base(dtype, shape, Shape(shape.size(), 1));
  t.codes = {random_floats(dtype, shape_numel(shape), -1, 1), dtype, 0, shape_numel(shape)};
  return sparse(t, keep);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType dt : {DType::Float16, DType::Float32}) {
    const std::string d = dt == DType::Float16 ? "fp16" : "fp32";
    out.push_back({"lut4_grouped_rows_" + d, lut(dt, {48, 100}, {3, 1}, 4, false)});
    out.push_back({"lut4_blocks_cols_" + d, lut(dt, {5, 96}, {1, 3}, 4, false)});
    out.push_back({"lut2_" + d, lut(dt, {33, 17}, {1, 1}, 2, false)});
    out.push_back({"lut8_plain_" + d, lut(dt, {9, 70}, {9, 1}, 8, true)});
    out.push_back({"lut8_packed_" + d, lut(dt, {9, 70}, {1, 1}, 8, false)});
    ir::PackedTensor lut6 = lut(dt, {7, 30}, {7, 1}, 6, false);
    lut6.codes.dtype = DType::UInt6;
    out.push_back({"lut6_" + d, lut6});
    out.push_back({"int4_block32_offset_" + d, shift_scale(dt, {40, 128}, {40, 4}, DType::Int4, true, DType::Int4)});
    out.push_back({"uint4_block32_" + d, shift_scale(dt, {3, 96}, {3, 3}, DType::UInt4, true, DType::UInt4)});
    out.push_back({"uint4_odd_cols_" + d, shift_scale(dt, {5, 63}, {5, 7}, DType::UInt4, true, DType::Float16)});
    out.push_back({"int8_per_channel_" + d, shift_scale(dt, {37, 100}, {37, 1}, DType::Int8, false, DType::Int8)});
    out.push_back({"uint8_offset_" + d, shift_scale(dt, {16, 50}, {16, 2}, DType::UInt8, true, DType::UInt8)});
    out.push_back({"int8_float_offset_" + d, shift_scale(dt, {16, 50}, {4, 5}, DType::Int8, true, DType::Float32)});
    out.push_back({"fp16_codes_" + d, shift_scale(dt, {6, 40}, {6, 1}, DType::Float16, true, DType::Float16)});
    out.push_back({"affine_int8_" + d, shift_scale(dt, {21, 33}, {21, 1}, DType::Int8, true, DType::Int8, ir::CodeMap::kAffine)});
    out.push_back({"affine_uint8_axis1_" + d,
                   shift_scale(dt, {21, 33}, {1, 33}, DType::UInt8, true, DType::Float32, ir::CodeMap::kAffine)});
    // Language-model shapes: K past one block of the product (2048), blocks of 32 and 64 with
    // int4, fp16 or 8-bit offsets or none, per channel, iOS16 affine; odd row counts; the
    // products with 1 to 4 rows of A (a decode step) and with 70.
    out.push_back({"int4_block64_half_offset_wide_" + d,
                   shift_scale(dt, {19, 2176}, {19, 34}, DType::Int4, true, DType::Float16)});
    out.push_back({"uint4_per_channel_uint8_offset_" + d,
                   shift_scale(dt, {13, 160}, {13, 1}, DType::UInt4, true, DType::UInt8)});
    out.push_back({"int4_block32_no_offset_" + d, shift_scale(dt, {9, 64}, {9, 2}, DType::Int4, false, DType::Int4)});
    out.push_back({"affine_int4_" + d, shift_scale(dt, {11, 96}, {11, 1}, DType::Int4, true, DType::Int8, ir::CodeMap::kAffine)});
    out.push_back({"int8_per_channel_wide_" + d, shift_scale(dt, {21, 2112}, {21, 1}, DType::Int8, false, DType::Int8)});
    out.push_back({"uint8_block64_offset_" + d, shift_scale(dt, {10, 128}, {10, 2}, DType::UInt8, true, DType::UInt8)});
    out.push_back({"affine_int8_k64_" + d, shift_scale(dt, {7, 64}, {7, 1}, DType::Int8, true, DType::Int8, ir::CodeMap::kAffine)});
    // Scales of both signs; and scales that the decode step's fp16 tables do not cover
    // (packed_codes_avx512.h, fp16_rounded_groups: subnormal, zero, 2^12 and past), so that
    // those rows take the stored tables.
    ir::PackedTensor negative = shift_scale(dt, {12, 128}, {12, 4}, DType::Int4, true, DType::Int4);
    ir::PackedTensor extremes = shift_scale(dt, {12, 128}, {12, 4}, DType::UInt4, true, DType::UInt4);
    const float extreme[] = {3e-6f, -2e-7f, 0.0f, 4200.0f, -4300.0f, 0.02f, -0.03f, 1.5f};
    for (int64_t i = 0; i < negative.group_count(); ++i) {
      const float n = (i % 2 ? -1.0f : 1.0f) * (0.001f + 0.004f * static_cast<float>(i % 11));
      const float e = extreme[i % 8];
      if (dt == DType::Float16) {
        negative.scale.ptr<half>()[i] = static_cast<half>(n);
        extremes.scale.ptr<half>()[i] = static_cast<half>(e);
      } else {
        negative.scale.ptr<float>()[i] = n;
        extremes.scale.ptr<float>()[i] = e;
      }
    }
    out.push_back({"int4_block32_negative_scales_" + d, negative});
    // More groups than one window of the decode step's fp16 product tables (packed_dot_x86.cc,
    // kProductWindowGroups), each shared by two rows: windows start inside a pair of rows.
    out.push_back({"int4_block32_row_pairs_" + d,
                   shift_scale(dt, {72, 1024}, {36, 32}, DType::Int4, true, DType::Int4)});
    out.push_back({"uint4_block32_extreme_scales_" + d, extremes});
    out.push_back({"sparse_wide_" + d, sparse_floats(dt, {11, 2112}, 0.5)});
    out.push_back({"sparse_k64_" + d, sparse_floats(dt, {6, 64}, 0.3)});
    out.push_back({"rank4_conv_" + d, shift_scale(dt, {8, 6, 3, 3}, {8, 2, 1, 1}, DType::Int4, true, DType::Int4)});
    out.push_back({"sparse_" + d, sparse_floats(dt, {29, 77}, 0.5)});
    out.push_back({"sparse_dense_rows_" + d, sparse_floats(dt, {4, 200}, 0.97)});
    out.push_back({"sparse_lut4_" + d, sparse(lut(dt, {32, 64}, {2, 1}, 4, false), 0.4)});
    // Rows of over a thousand codes, starting at odd and even code indices.
    out.push_back({"sparse_lut4_wide_" + d, sparse(lut(dt, {24, 2111}, {3, 1}, 4, false), 0.55)});
    out.push_back({"sparse_int8_" + d, sparse(shift_scale(dt, {12, 45}, {12, 1}, DType::Int8, false, DType::Int8), 0.6)});
  }
  return out;
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

// One level of the x86 loops, and for AVX-512 which way sparse values are spread into place
// (packed::spread_by_permute; expand: VBMI2's instructions even where the permute would run).
struct Loops {
  packed::SimdLevel level;
  bool expand = false;
};

// Runs each test at one level of the x86 loops; skipped where the CPU lacks it.
class PackedWeightTest : public ::testing::TestWithParam<Loops> {
 protected:
  void SetUp() override {
    packed::limit_simd(packed::SimdLevel::kAvx512);
    if (packed::simd_level() < GetParam().level) GTEST_SKIP() << "this CPU or build lacks these instructions";
    packed::limit_simd(GetParam().level);
    packed::prefer_expand(GetParam().expand);
  }
  void TearDown() override {
    packed::limit_simd(packed::SimdLevel::kAvx512);
    packed::prefer_expand(false);
  }
};

TEST_P(PackedWeightTest, DenseDecodeMatchesElementByElement) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_NO_THROW(check_packed(c.tensor));
    const Tensor expected = decode_dense_each(c.tensor);
    const Tensor got = decode_dense(c.tensor);
    ASSERT_EQ(got.shape, expected.shape);
    EXPECT_TRUE(same_bits(got.data, expected.data, got.nbytes()));
  }
}

TEST_P(PackedWeightTest, WindowsOfRowsMatch) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor expected = decode_dense_each(c.tensor);
    const PackedMatrix m(std::make_shared<ir::PackedTensor>(c.tensor));
    const int64_t rows = m.rows(), cols = m.cols();
    for (int trial = 0; trial < 40; ++trial) {
      const int64_t r0 = rng() % rows, nr = 1 + rng() % (rows - r0);
      const int64_t c0 = rng() % cols, nc = 1 + rng() % (cols - c0);
      std::vector<float> f(static_cast<size_t>(nr * (nc + 3)), -7.0f);
      m.decode(r0, nr, c0, nc, f.data(), nc + 3);
      std::vector<half> h(static_cast<size_t>(nr * nc));
      if (m.dtype() == DType::Float16) m.decode(r0, nr, c0, nc, h.data(), nc);
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t k = 0; k < nc; ++k) {
          const int64_t flat = (r0 + r) * cols + c0 + k;
          const float want = expected.dtype == DType::Float16 ? static_cast<float>(expected.ptr<half>()[flat])
                                                              : expected.ptr<float>()[flat];
          ASSERT_TRUE(same_bits(&f[r * (nc + 3) + k], &want, sizeof want))
              << "row " << r0 + r << " col " << c0 + k << ": " << f[r * (nc + 3) + k] << " != " << want;
          if (m.dtype() == DType::Float16) {
            ASSERT_EQ(static_cast<float>(h[r * nc + k]), want);
          }
        }
      for (int64_t r = 0; r < nr; ++r) ASSERT_EQ(f[r * (nc + 3) + nc], -7.0f) << "wrote past the window";
    }
  }
}

double value_at(const Tensor& dense, int64_t flat) {
  return dense.dtype == DType::Float16 ? static_cast<double>(static_cast<float>(dense.ptr<half>()[flat]))
                                       : double{dense.ptr<float>()[flat]};
}

// Whether the decode step's loops (PackedMatrix::dot_rows) take m's whole rows at this level.
bool decoded_in_registers(const PackedMatrix& m) {
  std::vector<float> a(static_cast<size_t>(m.cols()), 0.0f), c(static_cast<size_t>(m.rows()), 0.0f);
  return m.dot_rows(0, m.rows(), 0, m.cols(), a.data(), c.data());
}

// The forms whose whole rows the decode step's loops must take on AVX-512: 4-bit palettes and
// affine or shift-scale 4-bit codes whose groups keep 32-column blocks (even columns), every
// dense 8-bit affine or shift-scale form, and sparse fp16 values.
bool taken_on_avx512(const std::string& name) {
  for (const char* form : {"lut4_grouped_rows", "lut4_blocks_cols", "int4_block32_offset", "uint4_block32",
                           "int8_per_channel", "uint8_offset", "int8_float_offset", "affine_int8", "affine_uint8_axis1",
                           "int4_block64_half_offset_wide", "uint4_per_channel_uint8_offset", "int4_block32_no_offset",
                           "affine_int4", "uint8_block64_offset", "int4_block32_negative_scales",
                           "uint4_block32_extreme_scales", "int4_block32_row_pairs"})
    if (name.rfind(form, 0) == 0) return true;
  // Sparse fp16 values, and sparse 4-bit codes of an fp16 palette per row, where the CPU has
  // AVX-512 VBMI2 and BITALG.
#ifdef COREMLRT_PACKED_X86
  if (packed::has_vbmi2() && packed::has_bitalg())
    for (const char* form : {"sparse_wide_fp16", "sparse_k64_fp16", "sparse_fp16", "sparse_dense_rows_fp16", "sparse_lut4_fp16",
                             "sparse_lut4_wide_fp16"})
      if (name == form) return true;
#endif
  return false;
}

// The forms whose whole rows the decode step's loops must take on AVX2 alone: the dense 8-bit
// forms of taken_on_avx512, and its 4-bit forms whose values are fp16 (packed_dot_avx2.cc).
bool taken_on_avx2(const std::string& name) {
  for (const char* form : {"int8_per_channel", "uint8_offset", "int8_float_offset", "affine_int8", "affine_uint8_axis1",
                           "uint8_block64_offset"})
    if (name.rfind(form, 0) == 0) return true;
  const bool fp16 = name.size() > 5 && name.compare(name.size() - 5, 5, "_fp16") == 0;
  for (const char* form : {"lut4_grouped_rows", "lut4_blocks_cols", "int4_block32_offset", "uint4_block32",
                           "int4_block64_half_offset_wide", "uint4_per_channel_uint8_offset", "int4_block32_no_offset",
                           "affine_int4", "int4_block32_negative_scales", "uint4_block32_extreme_scales",
                           "int4_block32_row_pairs"})
    if (fp16 && name.rfind(form, 0) == 0) return true;
  return false;
}

// One row of A against windows of a packed W (a decode step), the codes decoded in registers:
// within a reordered sum's rounding of the exact products (K * 2^-24 * sum |a w|, onto what c
// held), and a one-hot row of A gives each value exactly, so that a wrong value cannot hide in
// the bound. Where the loops do not take a window, c is left as it was.
TEST_P(PackedWeightTest, DecodeStepDotProductsMatchTheValues) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor dense = decode_dense_each(c.tensor);
    const PackedMatrix m(std::make_shared<ir::PackedTensor>(c.tensor));
    const int64_t rows = m.rows(), cols = m.cols();
    const bool taken = packed::simd_level() == packed::SimdLevel::kAvx512 ? taken_on_avx512(c.name)
                       : packed::simd_level() == packed::SimdLevel::kAvx2  ? taken_on_avx2(c.name)
                                                                           : false;
    EXPECT_EQ(decoded_in_registers(m), taken);
    EXPECT_EQ(PackedMatrix::decodes_in_registers(c.tensor), taken);
    for (int trial = 0; trial < 24; ++trial) {
      // Whole rows first, then all rows but the first (whole windows of rows, each starting
      // one row later), then random windows.
      int64_t r0 = 0, nr = rows, c0 = 0, nc = cols;
      if (trial == 1) {
        r0 = rows > 1 ? 1 : 0;
        nr = rows - r0;
      } else if (trial > 1) {
        r0 = rng() % rows;
        nr = 1 + rng() % (rows - r0);
        c0 = rng() % cols;
        if (trial % 3 == 1) c0 -= c0 % 32;  // where blocks of 32 start
        if (trial % 3 == 2) c0 -= c0 % 2;
        nc = 1 + rng() % (cols - c0);
      }
      const Tensor a = random_floats(DType::Float32, nc, -1, 1);
      std::vector<float> got(static_cast<size_t>(nr), 0.5f);
      if (!m.dot_rows(r0, nr, c0, nc, a.ptr<float>(), got.data())) {
        for (float v : got) ASSERT_EQ(v, 0.5f) << "a refused window was written";
        continue;
      }
      for (int64_t j = 0; j < nr; ++j) {
        double exact = 0.5, magnitude = 0.5;
        for (int64_t k = 0; k < nc; ++k) {
          const double term = double{a.ptr<float>()[k]} * value_at(dense, (r0 + j) * cols + c0 + k);
          exact += term;
          magnitude += std::abs(term);
        }
        ASSERT_LE(std::abs(got[j] - exact), (nc + 1) * std::ldexp(1.0, -24) * magnitude)
            << "rows " << r0 << "+" << nr << ", cols " << c0 << "+" << nc << ", row " << r0 + j;
      }
      for (int64_t k : {int64_t{0}, nc - 1, static_cast<int64_t>(rng() % nc), static_cast<int64_t>(rng() % nc)}) {
        std::vector<float> one_hot(static_cast<size_t>(nc), 0.0f), value(static_cast<size_t>(nr), 0.0f);
        one_hot[k] = 1.0f;
        ASSERT_TRUE(m.dot_rows(r0, nr, c0, nc, one_hot.data(), value.data()));
        for (int64_t j = 0; j < nr; ++j)
          ASSERT_EQ(value[j], value_at(dense, (r0 + j) * cols + c0 + k)) << "row " << r0 + j << " col " << c0 + k;
      }
    }
  }
}

// C = A W^T (+ A W for an axpy-form B, W as A for conv's form) with W packed and with W dense.
TEST_P(PackedWeightTest, GemmReadsPackedWeightsAsTheDenseOnes) {
  for (const Case& c : cases()) {
    if (c.tensor.shape.size() != 2) continue;
    SCOPED_TRACE(c.name);
    const Tensor dense = decode_dense_each(c.tensor);
    const PackedMatrix m(std::make_shared<ir::PackedTensor>(c.tensor));
    const int64_t N = m.rows(), K = m.cols();
    for (int64_t M : {1, 2, 3, 4, 70}) {
      SCOPED_TRACE("M = " + std::to_string(M));
      const Tensor a = random_floats(DType::Float32, M * std::max(N, K), -1, 1);
      auto view_of_dense = [&](int64_t row_stride, int64_t col_stride) { return matrix_view(dense, 0, row_stride, col_stride); };
      // Dot form: B = W^T.
      std::vector<float> want(static_cast<size_t>(M * N)), got(static_cast<size_t>(M * N));
      gemm(M, N, K, MatrixView(a.ptr<float>(), K), view_of_dense(1, K), want.data(), N, false);
      gemm(M, N, K, MatrixView(a.ptr<float>(), K), MatrixView(m).transposed(), got.data(), N, false);
      if (M == 1 && decoded_in_registers(m)) {
        // A decode step's products sum in their own order: within the bound of a reordered sum.
        for (int64_t j = 0; j < N; ++j) {
          double magnitude = 0;
          for (int64_t k = 0; k < K; ++k) magnitude += std::abs(double{a.ptr<float>()[k]} * value_at(dense, j * K + k));
          EXPECT_LE(std::abs(double{got[j]} - want[j]), 2.0 * K * std::ldexp(1.0, -24) * magnitude) << "row " << j;
        }
      } else {
        EXPECT_TRUE(same_bits(want.data(), got.data(), want.size() * sizeof(float)));
      }
      // Axpy form: B = W [N rows of K] read as [K=N, N=K].
      std::vector<float> want2(static_cast<size_t>(M * K)), got2(static_cast<size_t>(M * K));
      gemm(M, K, N, MatrixView(a.ptr<float>(), N), view_of_dense(K, 1), want2.data(), K, false);
      gemm(M, K, N, MatrixView(a.ptr<float>(), N), MatrixView(m), got2.data(), K, false);
      EXPECT_TRUE(same_bits(want2.data(), got2.data(), want2.size() * sizeof(float)));
      // W as the left operand (a convolution's weight): C [N, M] = W [N, K] * B [K, M].
      std::vector<float> want3(static_cast<size_t>(N * M)), got3(static_cast<size_t>(N * M));
      gemm(N, M, K, view_of_dense(K, 1), MatrixView(a.ptr<float>(), M), want3.data(), M, false);
      gemm(N, M, K, MatrixView(m), MatrixView(a.ptr<float>(), M), got3.data(), M, false);
      EXPECT_TRUE(same_bits(want3.data(), got3.data(), want3.size() * sizeof(float)));
    }
  }
}

#ifdef COREMLRT_PACKED_X86
// Sixteen values x * scale rounded to fp16 by split_round_half16.
COREMLRT_AVX512 void split_round16(const float* x, float scale, float* out) {
  _mm512_storeu_ps(out, packed::split_round_half16(_mm512_loadu_ps(x), _mm512_set1_ps(scale), _mm512_set1_ps(scale * 8193.0f)));
}

// The decode step's fp16 group tables (fp16_rounded_groups, then split_round_half16 in
// registers) against rounding each value, for every fp16 scale, offsets at and past the ends of
// their range, int4 and uint4 codes, offsets read as fp16 and as packed 4-bit codes: bit for bit
// where they cover a group, and covering every group whose scale is normal below 2^12 with its
// offset in range.
TEST(PackedWeight, Fp16GroupTablesEqualRoundingEachValue) {
  if (packed::simd_level() != packed::SimdLevel::kAvx512) GTEST_SKIP() << "this CPU or build lacks AVX-512";
  const int64_t groups = 65536;
  ir::PackedTensor t = base(DType::Float16, {groups, 32}, {groups, 1});
  t.scale = Tensor::empty(DType::Float16, {groups});
  for (int64_t i = 0; i < groups; ++i) t.scale.ptr<uint16_t>()[i] = static_cast<uint16_t>(i);
  std::vector<float> scale(groups), scale_8193(groups), offset_of(groups);
  int64_t covered = 0;
  for (bool is_signed : {false, true}) {
    const int lo = is_signed ? -8 : 0, hi = is_signed ? 8 : 16;
    for (int offset : {lo - 1, lo, lo + 1, 3, hi - 1, hi, hi + 1}) {
      SCOPED_TRACE((is_signed ? "int4 codes, offset " : "uint4 codes, offset ") + std::to_string(offset));
      Tensor offsets = Tensor::empty(DType::Float16, {groups});
      for (int64_t i = 0; i < groups; ++i) offsets.ptr<half>()[i] = static_cast<half>(static_cast<float>(offset));
      t.offset = {offsets, DType::Float16, 0, groups};
      const bool in_range = offset >= lo && offset <= hi;
      for (int64_t g = 0; g < groups; ++g) {
        const bool taken = packed::fp16_rounded_groups(t, g, 1, is_signed, &scale[g], &scale_8193[g], &offset_of[g]);
        const int exponent = (g >> 10) & 31;
        ASSERT_EQ(taken, exponent >= 1 && exponent <= 26 && in_range) << "scale bits " << g;
        if (!taken) continue;
        ++covered;
        const float want_scale = static_cast<float>(t.scale.ptr<half>()[g]);
        ASSERT_EQ(scale[g], want_scale) << "scale bits " << g;
        ASSERT_EQ(scale_8193[g], want_scale * 8193.0f) << "scale bits " << g;
        ASSERT_EQ(offset_of[g], static_cast<float>(offset)) << "scale bits " << g;
        float differences[16], got[16];
        for (int code = 0; code < 16; ++code) differences[code] = static_cast<float>(code + lo) - offset_of[g];
        split_round16(differences, scale[g], got);
        for (int code = 0; code < 16; ++code) {
          const float want = packed::round_to_half((static_cast<float>(code + lo) - static_cast<float>(offset)) * want_scale);
          ASSERT_TRUE(same_bits(&got[code], &want, sizeof want)) << "scale bits " << g << " code " << code + lo << ": "
                                                                 << got[code] << " != " << want;
        }
      }
      // The same offsets packed as 4-bit codes, sixteen groups at a time, where they fit.
      if (!in_range || offset > (is_signed ? 7 : 15)) continue;
      t.offset = {pack_bits(std::vector<uint32_t>(groups, static_cast<uint32_t>(offset) & 15u), 4),
                  is_signed ? DType::Int4 : DType::UInt4, 4, groups};
      std::vector<float> scale16(groups), scale_8193_16(groups), offset16(groups);
      const int64_t normal = 1 << 10;  // exponent field 1 up to 26
      ASSERT_TRUE(packed::fp16_rounded_groups(t, normal, 26 * normal, is_signed, &scale16[normal],
                                              &scale_8193_16[normal], &offset16[normal]));
      for (int64_t g = normal; g < 27 * normal; ++g) {
        ASSERT_EQ(scale16[g], scale[g]) << "scale bits " << g;
        ASSERT_EQ(scale_8193_16[g], scale_8193[g]) << "scale bits " << g;
        ASSERT_EQ(offset16[g], offset_of[g]) << "scale bits " << g;
      }
      ASSERT_FALSE(packed::fp16_rounded_groups(t, 0, 2 * normal, is_signed, scale16.data(), scale_8193_16.data(),
                                               offset16.data()));
    }
  }
  EXPECT_EQ(covered, 2 * 5 * 2 * 26 * 1024);  // both code kinds, five offsets in range, both signs
}

// Byte codes' values rounded to fp16 by splitting (split_round_half16, the int8 decode step's
// loop) equal the conversion's rounding bit for bit, for every code of every fp16 scale that
// split_rounding_exact takes, with integer offsets; and it takes every normal scale whose values
// stay finite, and no scale or offset that would need more bits.
TEST(PackedWeight, SplitRoundingEqualsConvertingEachValue) {
  if (packed::simd_level() != packed::SimdLevel::kAvx512) GTEST_SKIP() << "this CPU or build lacks AVX-512";
  auto check = [](float scale, float offset, bool is_signed) {
    const int lo = is_signed ? -128 : 0;
    for (int first = lo; first < lo + 256; first += 16) {
      float codes[16], got[16];
      for (int i = 0; i < 16; ++i) codes[i] = static_cast<float>(first + i) - offset;
      split_round16(codes, scale, got);
      for (int i = 0; i < 16; ++i) {
        const float want = packed::round_to_half(codes[i] * scale);
        ASSERT_TRUE(same_bits(&got[i], &want, sizeof want))
            << "scale " << scale << " offset " << offset << " code " << first + i << ": " << got[i] << " != " << want;
      }
    }
  };
  for (bool is_signed : {true, false}) {
    for (float offset : {0.0f, -3.0f, 5.0f, 128.0f, 256.0f}) {
      int64_t covered = 0;
      for (uint32_t bits = 0; bits < 65536; ++bits) {
        const uint16_t raw = static_cast<uint16_t>(bits);
        half value;
        std::memcpy(&value, &raw, sizeof value);
        const float scale = static_cast<float>(value);
        if (!packed::split_rounding_exact(scale, offset, is_signed)) continue;
        ++covered;
        check(scale, offset, is_signed);
        if (HasFatalFailure()) return;
      }
      // Normal scales (exponent field 1 and up) whose widest value |code - offset| |scale| is
      // at most 65504: the exponent field's last taken value, widest * 2^(e - 15) * 2047/1024.
      const double widest = std::max(std::abs((is_signed ? -128.0 : 0.0) - offset), std::abs((is_signed ? 127.0 : 255.0) - offset));
      int64_t expected = 0;
      for (int e = 1; e <= 30; ++e)
        for (int m = 0; m < 1024; ++m)
          if (widest * std::ldexp(1.0 + m / 1024.0, e - 15) <= 65504.0) expected += 2;  // both signs
      EXPECT_EQ(covered, expected) << (is_signed ? "int8" : "uint8") << " codes, offset " << offset;
    }
  }
  EXPECT_FALSE(packed::split_rounding_exact(0.01f, 0.5f, true));                  // a fractional offset
  EXPECT_FALSE(packed::split_rounding_exact(0.01f, 0.0f, true));                  // 0.01f has 24 significant bits
  EXPECT_FALSE(packed::split_rounding_exact(std::ldexp(1.0f, -15), 0.0f, true));  // values below fp16's normal range
  EXPECT_FALSE(packed::split_rounding_exact(1024.0f, 0.0f, true));                // values past 65504
  EXPECT_FALSE(packed::split_rounding_exact(0.25f, 300.0f, false));               // an offset past 256
}
#endif

TEST(PackedWeight, SubByteConstantsDecodeToOneBytePerElement) {
  const std::vector<uint32_t> raw = random_codes(37, 4);
  ir::PackedTensor t = base(DType::Int4, {37}, {1});
  t.codes = {pack_bits(raw, 4), DType::Int4, 4, 37};
  const Tensor out = decode_dense(t);
  for (int64_t i = 0; i < 37; ++i) {
    const int expected = raw[i] >= 8 ? static_cast<int>(raw[i]) - 16 : static_cast<int>(raw[i]);
    EXPECT_EQ(out.ptr<int8_t>()[i], expected);
  }
}

TEST(PackedWeight, MalformedTensorsAreRefused) {
  ir::PackedTensor t = lut(DType::Float16, {4, 8}, {1, 1}, 4, false);
  ir::PackedTensor short_codes = t;
  short_codes.codes.count = 40;
  EXPECT_THROW(check_packed(short_codes), coremlrt::Error);
  ir::PackedTensor bad_groups = t;
  bad_groups.groups = {3, 1};
  EXPECT_THROW(check_packed(bad_groups), coremlrt::Error);
  ir::PackedTensor small_palette = lut(DType::Float16, {4, 8}, {1, 1}, 8, true);
  small_palette.palettes = 4;
  small_palette.table = random_floats(DType::Float16, 4, -1, 1);
  EXPECT_THROW(check_packed(small_palette), coremlrt::Error);  // codes up to 255 index a palette of 4
  ir::PackedTensor wrong_mask = sparse_floats(DType::Float32, {4, 8}, 0.5);
  wrong_mask.nonzero += 1;
  EXPECT_THROW(check_packed(wrong_mask), coremlrt::Error);
}

INSTANTIATE_TEST_SUITE_P(Loops, PackedWeightTest,
                         ::testing::Values(Loops{packed::SimdLevel::kAvx512}, Loops{packed::SimdLevel::kAvx512, true},
                                           Loops{packed::SimdLevel::kAvx2}, Loops{packed::SimdLevel::kPortable}),
                         [](const ::testing::TestParamInfo<Loops>& info) {
                           const packed::SimdLevel level = info.param.level;
                           return std::string(level == packed::SimdLevel::kAvx512 ? "avx512"
                                              : level == packed::SimdLevel::kAvx2 ? "avx2"
                                                                                  : "portable") +
                                  (info.param.expand ? "_expand" : "");
                         });

}  // namespace
}  // namespace coremlrt::ops
