#pragma once
// The pieces the decoders of packed_weight.cc share with their x86 versions
// (packed_codes_x86.cc): how one code of a group becomes its value. Internal to src/ops.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "coremlrt/tensor.h"
#include "ir/packed.h"

namespace coremlrt::ops::packed {

// Code i of a bit-packed array (LSB-first, `bits` wide, 1..8), not sign-extended.
inline uint32_t raw_code(const uint8_t* bytes, int64_t i, int bits) {
  const uint64_t bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  const unsigned shift = bit % 8;
  uint32_t word = bytes[bit / 8];
  if (shift + bits > 8) word |= static_cast<uint32_t>(bytes[bit / 8 + 1]) << 8;
  return (word >> shift) & ((1u << bits) - 1u);
}

// The integer a raw code stands for: int4 codes are sign-extended.
inline int32_t code_integer(uint32_t raw, int bits, bool is_signed) {
  return is_signed && (raw >> (bits - 1)) ? static_cast<int32_t>(raw) - (1 << bits) : static_cast<int32_t>(raw);
}

// Element i of a PackedArray as a float (integers exactly; fp16 widened).
inline float array_element(const ir::PackedArray& a, int64_t i) {
  if (a.bits)
    return static_cast<float>(code_integer(raw_code(a.data.ptr<uint8_t>(), i, a.bits), a.bits, a.dtype == DType::Int4));
  switch (a.dtype) {
    case DType::Int8: return a.data.ptr<int8_t>()[i];
    case DType::Int4: return a.data.ptr<int8_t>()[i];
    case DType::Float16: return static_cast<float>(a.data.ptr<half>()[i]);
    case DType::Float32: return a.data.ptr<float>()[i];
    default: return a.data.ptr<uint8_t>()[i];  // uint8 and unpacked unsigned sub-byte codes
  }
}

inline float round_to_half(float v) { return static_cast<float>(static_cast<half>(v)); }

// What turns the codes of one group into values.
struct Group {
  ir::CodeMap map = ir::CodeMap::kIdentity;
  bool half_values = false;  // the values are fp16 (every result is rounded to fp16)
  const void* table = nullptr;  // kLut: this group's palette, of the values' dtype
  float scale = 1, offset = 0;  // kShiftScale, kAffine
  bool half_scale = false;      // kShiftScale: arithmetic in fp16 (the scale's dtype)
  // kShiftScale in fp16 with integer codes of at most 8 bits and integer offsets: the code, the
  // offset and their difference are exact in fp16, so only the product needs rounding.
  bool exact_difference = false;
};

// Values of consecutive groups of one row: n values whose codes start at code index k; the first
// `first` of them belong to group g, then each next `block` to the next group.
struct Run {
  const ir::PackedTensor* tensor = nullptr;
  Group shape;  // what every group shares (group_at fills in the rest)
  int64_t g = 0, first = 0, block = 0, k = 0, n = 0;
};

// Group `index` of `t`: `shape` (what every group of t shares) with the group's own palette,
// scale and offset.
inline Group group_at(const ir::PackedTensor& t, Group shape, int64_t index) {
  if (shape.map == ir::CodeMap::kLut) {
    shape.table = static_cast<const char*>(t.table.data) + index * t.palettes * (shape.half_values ? 2 : 4);
  } else if (shape.map != ir::CodeMap::kIdentity) {
    shape.scale = t.scale.dtype == DType::Float16 ? static_cast<float>(t.scale.ptr<half>()[index]) : t.scale.ptr<float>()[index];
    shape.offset = t.offset.defined() ? array_element(t.offset, index) : 0.0f;
  }
  return shape;
}

// The value of a code (`code` as a number, `raw` its bits for a palette), as a float that is
// exact in the values' dtype. The same operations, in the same order, as the constexpr_* kernels
// that fold the op (src/ops/constexpr.cc).
inline float value_of(const Group& g, float code, uint32_t raw) {
  switch (g.map) {
    case ir::CodeMap::kIdentity: return code;
    case ir::CodeMap::kLut:
      return g.half_values ? static_cast<float>(static_cast<const half*>(g.table)[raw])
                           : static_cast<const float*>(g.table)[raw];
    case ir::CodeMap::kShiftScale:
      if (g.half_scale) return round_to_half(round_to_half(round_to_half(code) - round_to_half(g.offset)) * g.scale);
      return (code - g.offset) * g.scale;
    case ir::CodeMap::kAffine: {
      const float v = g.scale * (code - g.offset);
      return g.half_values ? round_to_half(v) : v;
    }
  }
  return 0;
}

// x86 versions of the hot loops (packed_codes_x86.cc): AVX-512 where the CPU has it, else
// AVX2 (x86-64-v3). Each returns false (or -1) when this CPU or build has neither, and the
// caller then runs the portable loop.
//   nibbles:  a run of 4-bit codes (k, first and block even), any map but kIdentity (a palette:
//             of 16 values)
//   bytes:    a run of int8 or uint8 codes, kShiftScale or kAffine
//   expand:   a sparse run of fp16 or fp32 codes (kIdentity): the mask's bits from bit
//             `position` on say which of the n values take the next code; returns codes used
// Out is half or float (packed_codes_x86.cc instantiates both).
template <class Out>
bool nibbles_simd(const Run& run, Out* out);
template <class Out>
bool bytes_simd(const Run& run, Out* out);
// What `expand` reads: a sparsity mask (bit i set: dense position i takes the next value) and
// the nonzero values in order, fp16 or fp32 (a sparse tensor's codes, or values decoded from its
// codes by the caller).
struct SparseValues {
  const uint8_t* mask = nullptr;
  int64_t mask_bytes = 0;
  const void* values = nullptr;
  DType dtype = DType::Float16;
  int64_t count = 0;

  // A sparse tensor of fp16 or fp32 codes (kIdentity).
  static SparseValues of(const ir::PackedTensor& t) {
    return {t.mask.ptr<uint8_t>(), t.mask.numel(), t.codes.data.data, t.codes.dtype, t.codes.count};
  }
};
template <class Out>
int64_t expand_simd(const SparseValues& s, int64_t position, int64_t k, int64_t n, Out* out);

// Rows [r0, r0 + nr) of a packed matrix, columns [c0, c0 + nc) (packed_weight.h's PackedMatrix):
// `cols` per row, groups of `row_block` rows by `col_groups` groups of `col_block` columns.
struct RowRuns {
  const ir::PackedTensor* tensor = nullptr;
  Group shape;
  int64_t r0 = 0, nr = 0, c0 = 0, nc = 0;
  int64_t cols = 0, row_block = 1, col_groups = 1, col_block = 1;
  // A sparse tensor (mask): the index of the value that each row's column c0 or the first set
  // bit after it takes (first_code[r - r0]).
  const int64_t* first_code = nullptr;
  // Sparse 4-bit palette codes: how many codes row r0 + j's columns take (code_count[j]).
  const int64_t* code_count = nullptr;
  // 4-bit codes: every group of the tensor is known to take tables computed in registers
  // (rounded_groups_everywhere), so a window's groups are converted without checks.
  bool groups_checked = false;

  // The run of row r's columns.
  Run run(int64_t r) const {
    Run out;
    out.tensor = tensor;
    out.shape = shape;
    out.g = (r / row_block) * col_groups + c0 / col_block;
    out.first = std::min(nc, (c0 / col_block + 1) * col_block - c0);
    out.block = col_block;
    out.k = r * cols + c0;
    out.n = nc;
    return out;
  }
};

// A decode step's dot products with the codes decoded in registers (packed_dot_x86.cc with
// AVX-512, packed_dot_avx2.cc with AVX2 alone): c[j] += the sum over row r0 + j's values v_i of
// v_i * a[i], j < nr. For 4-bit codes, a_split holds `a` reordered by 32 columns
// (a_split[32q + j] = a[32q + 2j], a_split[32q + 16 + j] = a[32q + 2j + 1], j < 16) and the
// rows' groups keep whole 32-column blocks (every run's k even, first == n or first and block
// multiples of 32). Otherwise codes are int8 or uint8,
// kShiftScale or kAffine, or a mask over fp16 values (kIdentity; first_code set; AVX-512
// VBMI2 or BITALG), each 32 columns' values spread into place by their mask bits. False, with c
// untouched, when this CPU or build has no such loop.
bool dot_simd(const RowRuns& rows, const float* a, const float* a_split, float* c);
// Whether dot_simd runs for `t` (`sparse`: read through its mask) on this CPU and build: with
// AVX-512, every form above (sparse values with AVX-512 BITALG or VBMI2); with AVX2, 4-bit codes
// of fp16 values and the byte codes (packed_dot_avx2.cc).
bool dot_simd_available(const ir::PackedTensor& t, bool sparse);
// Whether dot_simd computes the tables of every group of `t` (4-bit codes; `shape` what its
// groups share) in registers, so that RowRuns::groups_checked may be set: read once per
// tensor, it spares each call's check.
bool rounded_groups_everywhere(const ir::PackedTensor& t, const Group& shape);
// Tests: true makes sparse values go through VBMI2's expand instructions even where the CPU has
// BITALG (spread_by_permute), so that both ways are tested on one machine; default false.
void prefer_expand(bool expand);

// The instruction sets the loops above may use: kAvx512, kAvx2 or kPortable (none), capped by
// what the CPU has. For tests, which run every level the machine offers; default kAvx512.
enum class SimdLevel { kPortable, kAvx2, kAvx512 };
void limit_simd(SimdLevel level);
// The level the loops use now.
SimdLevel simd_level();

}  // namespace coremlrt::ops::packed
