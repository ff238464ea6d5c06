// Decoders of packed constants (packed_weight.h). A row of a PackedMatrix is decoded one group
// (block) at a time: the group's parameters are looked up once, then its codes run through
// the fastest loop that fits them (packed_codes_avx512.cc on AVX-512 machines, the portable
// loops below elsewhere, and an element-by-element loop for the rare forms).
#include "ops/packed_weight.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "ops/packed_codes.h"
#include "ops/util.h"

namespace coremlrt::ops {

using packed::Group;

namespace {

bool bit_set(const uint8_t* mask, int64_t p) { return (mask[p / 8] >> (p % 8)) & 1u; }

// Set bits of the mask in [begin, end).
template <class Count>
[[gnu::always_inline]] inline int64_t count_set_with(const uint8_t* mask, int64_t begin, int64_t end, Count count) {
  int64_t n = 0;
  while (begin < end && begin % 64) n += bit_set(mask, begin++);
  for (; begin + 64 <= end; begin += 64) {
    uint64_t word;
    std::memcpy(&word, mask + begin / 8, sizeof word);
    n += count(word);
  }
  while (begin < end) n += bit_set(mask, begin++);
  return n;
}

// On x86 with the popcnt instruction where the CPU has it: the baseline build counts through a
// library call, which took 6 % of a sparse palettized decoder's decode step.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) int64_t count_set_popcnt(const uint8_t* mask, int64_t begin, int64_t end) {
  return count_set_with(mask, begin, end, [](uint64_t w) __attribute__((always_inline)) { return __builtin_popcountll(w); });
}
#endif

int64_t count_set(const uint8_t* mask, int64_t begin, int64_t end) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool popcnt = __builtin_cpu_supports("popcnt");
  if (popcnt) return count_set_popcnt(mask, begin, end);
#endif
  return count_set_with(mask, begin, end, [](uint64_t w) { return std::popcount(w); });
}

bool is_signed_code(DType dtype) { return dtype == DType::Int4 || dtype == DType::Int8; }

bool is_integer_code(DType d) { return !is_float(d); }

// What every group of `t` shares.
Group group_shape(const ir::PackedTensor& t) {
  Group out;
  out.map = t.map;
  out.half_values = t.dtype == DType::Float16;
  if (t.map == ir::CodeMap::kShiftScale || t.map == ir::CodeMap::kAffine) {
    out.half_scale = t.map == ir::CodeMap::kShiftScale && t.scale.dtype == DType::Float16;
    out.exact_difference = out.half_scale && is_integer_code(t.codes.dtype) &&
                           (!t.offset.defined() || is_integer_code(t.offset.dtype));
  }
  return out;
}

// The parameters of group g.
Group group_of(const ir::PackedTensor& t, int64_t g) { return packed::group_at(t, group_shape(t), g); }

// Code k as (number, raw bits).
struct Code {
  float number;
  uint32_t raw;
};
Code code_at(const ir::PackedArray& codes, int64_t k) {
  if (codes.bits) {
    const uint32_t raw = packed::raw_code(codes.data.ptr<uint8_t>(), k, codes.bits);
    return {static_cast<float>(packed::code_integer(raw, codes.bits, codes.dtype == DType::Int4)), raw};
  }
  const float number = packed::array_element(codes, k);
  const bool byte_code = !is_float(codes.dtype) && codes.data.dtype != DType::Float16;
  return {number, byte_code ? codes.data.ptr<uint8_t>()[k] : 0u};
}

template <class Out>
Out value_at(const Group& g, const ir::PackedArray& codes, int64_t k) {
  const Code c = code_at(codes, k);
  return static_cast<Out>(packed::value_of(g, c.number, c.raw));
}

// The element-by-element decoder of any packed tensor, of any rank (decode_dense's fallback;
// the tests' reference). Integer values (a sub-byte constant: kIdentity) are written as bytes.
template <class Out>
void decode_each(const ir::PackedTensor& t, Out* out) {
  const uint8_t* mask = t.mask.defined() ? t.mask.ptr<uint8_t>() : nullptr;
  int64_t k = 0, o = 0;
  int64_t cached = -1;
  Group group;
  for_each_grouped(t.shape, t.groups, [&](int64_t p, int64_t g) {
    if (mask && !bit_set(mask, p)) {
      if (!t.nonzero_only) out[o++] = Out(0);
      return;
    }
    if (g != cached) group = group_of(t, cached = g);
    if constexpr (std::is_same_v<Out, uint8_t>) {
      out[o++] = static_cast<uint8_t>(static_cast<int32_t>(code_at(t.codes, k++).number));
    } else {
      out[o++] = value_at<Out>(group, t.codes, k++);
    }
  });
}

// ---- portable loops for one group's run of codes (the AVX-512 ones are tried first)

// 4-bit codes from an even index k, through the group's sixteen values.
template <class Out>
void nibbles_portable(const Group& g, bool is_signed, const uint8_t* codes, int64_t k, int64_t n, Out* out) {
  Out values[16];
  for (uint32_t raw = 0; raw < 16; ++raw)
    values[raw] = static_cast<Out>(packed::value_of(g, static_cast<float>(packed::code_integer(raw, 4, is_signed)), raw));
  const uint8_t* bytes = codes + k / 2;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const uint8_t b = bytes[i / 2];
    out[i] = values[b & 15];
    out[i + 1] = values[b >> 4];
  }
  if (i < n) out[i] = values[bytes[i / 2] & 15];
}

// Decodes n values of a dense tensor whose codes start at index k, all in group g.
template <class Out>
void decode_group(const ir::PackedTensor& t, const Group& g, int64_t k, int64_t n, Out* out) {
  const ir::PackedArray& codes = t.codes;
  const bool is_signed = is_signed_code(codes.dtype);
  if (codes.bits == 4 && k % 2 == 0 && g.map != ir::CodeMap::kIdentity && (g.map != ir::CodeMap::kLut || t.palettes == 16)) {
    nibbles_portable(g, is_signed, codes.data.ptr<uint8_t>(), k, n, out);
    return;
  }
  if (codes.bits == 0 && g.map == ir::CodeMap::kIdentity && codes.dtype == DType::Float16) {
    const half* src = codes.data.ptr<half>() + k;
    if constexpr (std::is_same_v<Out, half>) std::memcpy(out, src, n * sizeof(half));
    else half_to_float(src, out, n);
    return;
  }
  if constexpr (std::is_same_v<Out, float>) {
    if (codes.bits == 0 && g.map == ir::CodeMap::kIdentity && codes.dtype == DType::Float32) {
      std::memcpy(out, codes.data.ptr<float>() + k, n * sizeof(float));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = value_at<Out>(g, codes, k + i);
}

// Decodes a run of groups of a dense tensor: through the x86 loops where they fit, else group by
// group.
template <class Out>
void decode_run(const packed::Run& run, Out* out) {
  const ir::PackedTensor& t = *run.tensor;
  const ir::PackedArray& codes = t.codes;
  const ir::CodeMap map = run.shape.map;
  if (codes.bits == 4 && map != ir::CodeMap::kIdentity && (map != ir::CodeMap::kLut || t.palettes == 16) &&
      run.k % 2 == 0 && run.first % 2 == 0 && run.block % 2 == 0 && packed::nibbles_simd(run, out))
    return;
  if (codes.bits == 0 && (codes.dtype == DType::Int8 || codes.dtype == DType::UInt8) &&
      (map == ir::CodeMap::kShiftScale || map == ir::CodeMap::kAffine) && packed::bytes_simd(run, out))
    return;
  int64_t done = 0, g = run.g;
  for (int64_t len = run.first; done < run.n; len = run.block, ++g) {
    len = std::min(len, run.n - done);
    decode_group(t, packed::group_at(t, run.shape, g), run.k + done, len, out + done);
    done += len;
  }
}

// Decodes n values of a sparse tensor from dense position p on, in group g, whose first set
// position takes code k. Returns the codes used.
// `shape` and `index` name group g as packed::group_at takes them.
template <class Out>
int64_t decode_sparse_run(const ir::PackedTensor& t, const Group& shape, int64_t index, int64_t p, int64_t k, int64_t n,
                          Out* out) {
  const Group g = packed::group_at(t, shape, index);
  if (g.map == ir::CodeMap::kIdentity && t.codes.bits == 0) {
    const int64_t used = packed::expand_simd(packed::SparseValues::of(t), p, k, n, out);
    if (used >= 0) return used;
  }
  // The run's nonzero values are consecutive codes: decode them together (decode_group takes
  // the 4-bit palette loop from an even code on), then spread them over the run by the mask, a
  // byte of it at a time where it is all clear or all set.
  const uint8_t* mask = t.mask.ptr<uint8_t>();
  const int64_t used = count_set(mask, p, p + n);
  thread_local std::vector<Out> values;
  values.resize(static_cast<size_t>(used));
  int64_t first = 0;
  if (used > 0 && k % 2 != 0) values[first++] = value_at<Out>(g, t.codes, k);
  // From an even code on, an even count: what the x86 4-bit loops take (decode_run); the last
  // code of an odd count alone.
  packed::Run run;
  run.tensor = &t;
  run.shape = shape;
  run.g = index;
  run.k = k + first;
  run.n = run.first = run.block = (used - first) & ~int64_t{1};
  if (run.n > 0) decode_run(run, values.data() + first);
  if (first + run.n < used) values[used - 1] = value_at<Out>(g, t.codes, k + used - 1);
  if constexpr (std::is_same_v<Out, half>) {
    // fp16 values spread by the loop that spreads a sparse fp16 tensor's own values.
    const packed::SparseValues spread{mask, t.mask.numel(), values.data(), DType::Float16, used};
    if (packed::expand_simd(spread, p, 0, n, out) == used) return used;
  }
  const Out* v = values.data();
  for (int64_t i = 0; i < n;) {
    const int64_t q = p + i;
    if (q % 8 == 0 && i + 8 <= n && (mask[q / 8] == 0 || mask[q / 8] == 0xFF)) {
      if (mask[q / 8] == 0) {
        std::fill_n(out + i, 8, Out(0));
      } else {
        std::copy_n(v, 8, out + i);
        v += 8;
      }
      i += 8;
      continue;
    }
    out[i++] = bit_set(mask, q) ? *v++ : Out(0);
  }
  return used;
}

}  // namespace

void check_packed(const ir::PackedTensor& t) {
  const int64_t count = shape_numel(t.shape);
  for (int64_t d : t.shape) COREMLRT_CHECK(d >= 0, "packed constant: negative dim in ", shape_str(t.shape));
  COREMLRT_CHECK(t.groups.size() == t.shape.size(), "packed constant: block grid ", shape_str(t.groups),
                 " does not have the rank of ", shape_str(t.shape));
  for (size_t d = 0; d < t.shape.size(); ++d)
    COREMLRT_CHECK(t.groups[d] > 0 && t.shape[d] % t.groups[d] == 0, "packed constant: block grid ",
                   shape_str(t.groups), " does not divide ", shape_str(t.shape));
  const ir::PackedArray& c = t.codes;
  COREMLRT_CHECK(c.data.defined(), "packed constant: no codes");
  if (c.bits) {
    COREMLRT_CHECK(c.bits >= 1 && c.bits <= 8 && c.data.dtype == DType::UInt8 &&
                       static_cast<uint64_t>(c.data.numel()) * 8 >= static_cast<uint64_t>(c.count) * c.bits,
                   "packed constant: ", c.data.numel(), " bytes hold fewer than ", c.count, " ", c.bits, "-bit codes");
  } else {
    COREMLRT_CHECK(c.data.numel() == c.count, "packed constant: ", c.data.numel(), " codes where ", c.count,
                   " are needed");
  }
  if (t.mask.defined()) {
    COREMLRT_CHECK(t.mask.dtype == DType::UInt8 && t.mask.numel() * 8 >= count, "packed constant: the mask holds ",
                   t.mask.numel() * 8, " bits for ", count, " elements");
    const int64_t set = count_set(t.mask.ptr<uint8_t>(), 0, count);
    COREMLRT_CHECK(set == t.nonzero && c.count == set, "packed constant: the mask has ", set, " set bits but there are ",
                   c.count, " nonzero values");
  } else {
    COREMLRT_CHECK(!t.nonzero_only && c.count == count, "packed constant: ", c.count, " codes for ", count,
                   " elements");
  }
  const int64_t groups = t.group_count();
  switch (t.map) {
    case ir::CodeMap::kIdentity:
      COREMLRT_CHECK(c.dtype == t.dtype, "packed constant: ", dtype_name(c.dtype), " codes for ", dtype_name(t.dtype),
                     " values");
      break;
    case ir::CodeMap::kLut: {
      COREMLRT_CHECK(is_fp32_or_fp16(t.dtype) && t.table.dtype == t.dtype && t.palettes > 0 &&
                         t.table.numel() == groups * t.palettes,
                     "packed constant: a palette of ", t.table.numel(), " ", dtype_name(t.table.dtype),
                     " values for ", groups, " groups of ", t.palettes);
      COREMLRT_CHECK(c.dtype != DType::Int4 && c.dtype != DType::Int8 && (c.bits || c.dtype == DType::UInt8),
                     "packed constant: palette indices must be unsigned integers, not ", dtype_name(c.dtype));
      const int bits = c.bits ? c.bits : 8;
      if ((int64_t{1} << bits) > t.palettes) {  // some codes could index past the palette: look
        for (int64_t k = 0; k < c.count; ++k)
          COREMLRT_CHECK(code_at(c, k).raw < static_cast<uint32_t>(t.palettes), "packed constant: index ",
                         code_at(c, k).raw, " is out of range for ", t.palettes, " palette entries");
      }
      break;
    }
    case ir::CodeMap::kShiftScale:
    case ir::CodeMap::kAffine:
      COREMLRT_CHECK(is_fp32_or_fp16(t.dtype) && is_fp32_or_fp16(t.scale.dtype) && t.scale.numel() == groups,
                     "packed constant: ", t.scale.numel(), " scales for ", groups, " groups");
      COREMLRT_CHECK(!t.offset.defined() || t.offset.count == groups, "packed constant: ", t.offset.count,
                     " offsets for ", groups, " groups");
      break;
  }
}

Tensor decode_dense(const ir::PackedTensor& t) {
  const bool by_rows = (t.map == ir::CodeMap::kIdentity && !is_float(t.dtype)) || PackedMatrix::readable(t);
  if (!by_rows) return decode_dense_each(t);
  Tensor out = Tensor::empty(t.dtype, t.value_shape());
  decode_dense_into(t, out);
  return out;
}

void decode_dense_into(const ir::PackedTensor& t, const Tensor& out) {
  COREMLRT_CHECK(out.dtype == t.dtype && out.shape == t.value_shape(), "packed constant: decoding ",
                 shape_str(t.value_shape()), " ", dtype_name(t.dtype), " values into a ", shape_str(out.shape), " ",
                 dtype_name(out.dtype), " tensor");
  if (out.numel() == 0) return;
  if (t.map == ir::CodeMap::kIdentity && !is_float(t.dtype)) {
    decode_each(t, out.ptr<uint8_t>());
    return;
  }
  if (PackedMatrix::readable(t)) {
    // Matrices decode by rows, through the fast loops, a block of rows per pool thread.
    auto matrix = std::shared_ptr<const ir::PackedTensor>(&t, [](const ir::PackedTensor*) {});
    const PackedMatrix m(matrix);
    const int64_t cols = m.cols();
    parallel_for(m.rows(), std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(cols, 1)),
                 [&](int64_t begin, int64_t end) {
                   if (t.dtype == DType::Float16) m.decode(begin, end - begin, 0, cols, out.ptr<half>() + begin * cols, cols);
                   else m.decode(begin, end - begin, 0, cols, out.ptr<float>() + begin * cols, cols);
                 });
    return;
  }
  const Tensor each = decode_dense_each(t);
  std::memcpy(out.data, each.data, each.nbytes());
}

Tensor decode_dense_each(const ir::PackedTensor& t) {
  Tensor out = Tensor::empty(t.dtype, t.value_shape());
  if (out.numel() == 0) return out;
  if (t.map == ir::CodeMap::kIdentity && !is_float(t.dtype)) decode_each(t, out.ptr<uint8_t>());
  else if (t.dtype == DType::Float16) decode_each(t, out.ptr<half>());
  else decode_each(t, out.ptr<float>());
  return out;
}

bool PackedMatrix::readable(const ir::PackedTensor& t, std::string* why_not) {
  std::string why;
  if (t.shape.size() < 2) why = "it is not a matrix";
  else if (t.nonzero_only) why = "it holds only the nonzero values";
  else if (!is_fp32_or_fp16(t.dtype)) why = std::string("its values are ") + dtype_name(t.dtype);
  for (size_t d = 2; why.empty() && d < t.shape.size(); ++d)
    if (t.groups[d] != 1) why = "its blocks split dim " + std::to_string(d);
  if (why.empty()) return true;
  if (why_not) *why_not = std::move(why);
  return false;
}

PackedMatrix::PackedMatrix(std::shared_ptr<const ir::PackedTensor> t) : t_(std::move(t)) {
  std::string why;
  COREMLRT_CHECK(readable(*t_, &why), "a packed constant of shape ", shape_str(t_->shape), " cannot be read by rows: ",
                 why);
  rows_ = t_->shape[0];
  cols_ = rows_ ? shape_numel(t_->shape) / rows_ : 0;
  row_block_ = rows_ / t_->groups[0];
  col_groups_ = t_->groups[1];
  col_block_ = cols_ / col_groups_;
  if (t_->mask.defined()) {
    row_codes_.resize(static_cast<size_t>(rows_));
    int64_t k = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      row_codes_[r] = k;
      k += count_set(t_->mask.ptr<uint8_t>(), r * cols_, (r + 1) * cols_);
    }
  }
}

template <class Out>
void PackedMatrix::decode_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc, Out* dst, int64_t ld) const {
  const ir::PackedTensor& t = *t_;
  const bool sparse = t.mask.defined();
  const Group shape = group_shape(t);
  for (int64_t r = r0; r < r0 + nr; ++r) {
    Out* out = dst + (r - r0) * ld;
    const int64_t row_start = r * cols_;
    if (!sparse) {
      packed::Run run;
      run.tensor = &t;
      run.shape = shape;
      run.g = (r / row_block_) * col_groups_ + c0 / col_block_;
      run.first = std::min(nc, (c0 / col_block_ + 1) * col_block_ - c0);
      run.block = col_block_;
      run.k = row_start + c0;
      run.n = nc;
      decode_run(run, out);
      continue;
    }
    int64_t k = row_codes_[r] + count_set(t.mask.ptr<uint8_t>(), row_start, row_start + c0);
    for (int64_t c = c0; c < c0 + nc;) {
      const int64_t block = c / col_block_;
      const int64_t end = std::min(c0 + nc, (block + 1) * col_block_);
      k += decode_sparse_run(t, shape, (r / row_block_) * col_groups_ + block, row_start + c, k, end - c,
                             out + (c - c0));
      c = end;
    }
  }
}

namespace {

// The forms of the decode step's loops (packed_codes.h, dot_simd) for columns from c0 on.
struct RegisterForm {
  bool sparse = false, nibbles = false, bytes = false;
  bool any() const { return sparse || nibbles || bytes; }
};

RegisterForm register_form(const ir::PackedTensor& t, int64_t cols, int64_t col_groups, int64_t col_block, int64_t c0) {
  RegisterForm f;
  // Sparse fp16 values, or sparse 4-bit codes of one fp16 palette per row (of 16 values).
  const bool fp16_values = t.map == ir::CodeMap::kIdentity && t.codes.bits == 0 && t.codes.dtype == DType::Float16;
  const bool row_palettes = t.map == ir::CodeMap::kLut && t.codes.bits == 4 && t.palettes == 16 &&
                            t.dtype == DType::Float16 && col_groups == 1;
  f.sparse = t.mask.defined() && !t.nonzero_only && (fp16_values || row_palettes);
  if (t.mask.defined()) return f;
  f.nibbles = t.codes.bits == 4 && t.map != ir::CodeMap::kIdentity && (t.map != ir::CodeMap::kLut || t.palettes == 16) &&
              cols % 2 == 0 && c0 % 2 == 0 && (col_groups == 1 || (col_block % 32 == 0 && c0 % 32 == 0));
  f.bytes = t.codes.bits == 0 && (t.codes.dtype == DType::Int8 || t.codes.dtype == DType::UInt8) &&
            (t.map == ir::CodeMap::kShiftScale || t.map == ir::CodeMap::kAffine);
  return f;
}

}  // namespace

bool PackedMatrix::decodes_in_registers(const ir::PackedTensor& t) {
  if (!readable(t) || t.shape.empty() || t.shape[0] == 0) return false;
  const int64_t cols = shape_numel(t.shape) / t.shape[0], col_groups = t.groups[1];
  const RegisterForm f = register_form(t, cols, col_groups, cols / col_groups, 0);
  return f.any() && packed::dot_simd_available(t, f.sparse);
}

bool PackedMatrix::dot_rows(int64_t r0, int64_t nr, int64_t c0, int64_t nc, const float* a, float* c) const {
  const ir::PackedTensor& t = *t_;
  if (nr <= 0 || nc <= 0) return false;
  const RegisterForm form = register_form(t, cols_, col_groups_, col_block_, c0);
  const bool sparse = form.sparse, nibbles = form.nibbles;
  if (!form.any()) return false;
  // 4-bit codes are read 32 at a time, their low nibbles (even columns) apart from their high
  // nibbles (odd columns): `a` reordered to match, once for every row.
  thread_local std::vector<float> split;
  if (nibbles) {
    split.assign(a, a + nc);
    for (int64_t q = 0; q + 32 <= nc; q += 32)
      for (int64_t j = 0; j < 16; ++j) {
        split[q + j] = a[q + 2 * j];
        split[q + 16 + j] = a[q + 2 * j + 1];
      }
  }
  packed::RowRuns rows;
  rows.tensor = &t;
  rows.shape = group_shape(t);
  rows.r0 = r0;
  rows.nr = nr;
  rows.c0 = c0;
  rows.nc = nc;
  rows.cols = cols_;
  rows.row_block = row_block_;
  rows.col_groups = col_groups_;
  rows.col_block = col_block_;
  if (nibbles) {
    std::call_once(groups_checked_once_, [&] { groups_checked_ = packed::rounded_groups_everywhere(t, rows.shape); });
    rows.groups_checked = groups_checked_;
  }
  thread_local std::vector<int64_t> first_code, code_count;
  if (sparse) {
    first_code.resize(static_cast<size_t>(nr));
    for (int64_t r = r0; r < r0 + nr; ++r)
      first_code[r - r0] = row_codes_[r] + count_set(t.mask.ptr<uint8_t>(), r * cols_, r * cols_ + c0);
    rows.first_code = first_code.data();
    if (t.map == ir::CodeMap::kLut) {
      code_count.resize(static_cast<size_t>(nr));
      for (int64_t r = r0; r < r0 + nr; ++r) {
        // Whole rows (the decode step's): the codes up to the next row's first.
        const int64_t next_row = r + 1 < rows_ ? row_codes_[r + 1] : t.nonzero;
        code_count[r - r0] = c0 == 0 && nc == cols_ ? next_row - row_codes_[r]
                                                    : count_set(t.mask.ptr<uint8_t>(), r * cols_ + c0, r * cols_ + c0 + nc);
      }
      rows.code_count = code_count.data();
    }
  }
  return packed::dot_simd(rows, a, split.data(), c);
}

void PackedMatrix::decode(int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* dst, int64_t ld) const {
  decode_rows(r0, nr, c0, nc, dst, ld);
}

void PackedMatrix::decode(int64_t r0, int64_t nr, int64_t c0, int64_t nc, half* dst, int64_t ld) const {
  COREMLRT_CHECK(t_->dtype == DType::Float16, "packed constant: fp16 values asked of a ", dtype_name(t_->dtype),
                 " tensor");
  decode_rows(r0, nr, c0, nc, dst, ld);
}

}  // namespace coremlrt::ops
