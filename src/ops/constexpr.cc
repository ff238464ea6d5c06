// Weight decompression ops, constexpr_* (docs/design/coreml-format.md, "constexpr op serialization" and
// "Weight decompression (constexpr_*)"). Every parameter is a
// compile-time constant: iOS16 ops keep them as attributes, iOS18 ops as inputs (possibly the
// output of another constexpr op); KernelBuilder::constant reads both, and since such a kernel
// asks for no runtime input the planner runs it once at load and keeps the result, unless it
// keeps the result packed (constexpr_packed.h). These kernels are the reference the packed
// decoders (packed_weight.h) are tested against.
// Sub-byte tensors (uint1..uint6, int4) reach these kernels unpacked, one byte per element
// (KernelBuilder::constant decodes them); only the iOS16 forms carry bit-packed uint8 streams,
// which are unpacked here (LSB first).
#include <cstring>

#include "ops/constexpr_packed.h"
#include "ops/register.h"
#include "ops/strided.h"
#include "ops/util.h"

namespace coremlrt::ops {

namespace {

const Tensor& param(const KernelBuilder& b, const std::string& name) {
  const ir::ConstValue* value = b.constant(name);
  b.check(value != nullptr, "missing required parameter '", name, "'");
  b.check(value->type.kind == ir::TypeKind::Tensor && value->tensor.defined(), "parameter '", name, "' must be a tensor");
  return value->tensor;
}

// An undefined tensor when the parameter is absent.
Tensor optional_param(const KernelBuilder& b, const std::string& name) {
  return b.constant(name) ? param(b, name) : Tensor();
}

void check_mask(const KernelBuilder& b, const Tensor& mask) {
  b.check(mask.dtype == DType::UInt1 || mask.dtype == DType::Bool || mask.dtype == DType::UInt8, "mask must be uint1, not ",
          dtype_name(mask.dtype));
}

// Calls fn(TypeTag<S>{}) with the storage type S of a numeric dtype; sub-byte dtypes are
// stored one byte per element (int4 sign-extended).
template <class Fn>
void dispatch_storage(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Int4:
    case DType::Int8: fn(TypeTag<int8_t>{}); return;
    case DType::UInt1:
    case DType::UInt2:
    case DType::UInt3:
    case DType::UInt4:
    case DType::UInt6:
    case DType::UInt8:
    case DType::Bool: fn(TypeTag<uint8_t>{}); return;
    case DType::Float16: fn(TypeTag<half>{}); return;
    case DType::Float32: fn(TypeTag<float>{}); return;
    default: fail("constexpr: unsupported dtype ", dtype_name(dtype));
  }
}

// The dtypes dispatch_storage handles.
constexpr DTypeSet kStorageDTypes{DType::Int4,  DType::Int8,  DType::UInt1, DType::UInt2,   DType::UInt3,  DType::UInt4,
                                  DType::UInt6, DType::UInt8, DType::Bool,  DType::Float16, DType::Float32};

// All values of a (small) numeric tensor as float.
std::vector<float> floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_storage(t.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(t.ptr<S>()[i]);
  });
  return out;
}

// Unpacks `count` values of `bits` bits from an LSB-first bit stream.
std::vector<uint8_t> unpack_bits(const KernelBuilder& b, const Tensor& packed, int64_t count, int bits) {
  b.check(packed.dtype == DType::UInt8 || packed.dtype == DType::Int8, "packed data must be uint8, not ",
          dtype_name(packed.dtype));
  b.check(packed.numel() * 8 >= count * bits, packed.numel(), " packed bytes hold fewer than ", count, " ", bits,
          "-bit values");
  const uint8_t* bytes = packed.ptr<uint8_t>();
  std::vector<uint8_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    unsigned v = 0;
    for (int k = 0; k < bits; ++k) {
      const int64_t bit = i * bits + k;
      v |= ((bytes[bit / 8] >> (bit % 8)) & 1u) << k;
    }
    out[i] = static_cast<uint8_t>(v);
  }
  return out;
}

// Checks that `groups` has the rank of `shape` and divides it.
void check_blocks(const KernelBuilder& b, const Shape& shape, const Shape& groups, const char* what) {
  b.check(groups.size() == shape.size(), what, " has shape ", shape_str(groups), ", which does not have the rank of ",
          shape_str(shape));
  for (size_t d = 0; d < shape.size(); ++d)
    b.check(groups[d] > 0 && shape[d] % groups[d] == 0, what, " shape ", shape_str(groups), " does not divide ",
            shape_str(shape));
}

// Scatters nonzero values into zeros at the positions where mask (one byte per element) is set.
Tensor sparse_to_dense(const KernelBuilder& b, const Tensor& values, const uint8_t* mask, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  int64_t set = 0;
  for (int64_t i = 0; i < n; ++i) set += mask[i] != 0;
  b.check(set == values.numel(), "mask has ", set, " set bits but nonzero_data has ", values.numel(), " values");
  Tensor out = Tensor::empty(values.dtype, shape);
  const size_t es = dtype_size(values.dtype);
  if (out.nbytes()) std::memset(out.data, 0, out.nbytes());
  const char* src = static_cast<const char*>(values.data);
  char* dst = static_cast<char*>(out.data);
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) std::memcpy(dst + i * es, src, es), src += es;
  return out;
}

// iOS18 lut_to_dense: lut is [G_0..G_{K-1}, 2^nbits, V]; each index picks a row of V values
// from its block's table, laid out consecutively along vector_axis.
struct Lut {
  Tensor lut;
  int64_t vector_axis = 0;
  int64_t palettes = 0, vector = 1;
  Shape groups;
};

Lut read_lut(const KernelBuilder& b, const Tensor& lut, const Shape& indices_shape, int index_bits,
             const ir::ConstValue* vector_axis) {
  Lut l;
  l.lut = lut;
  const int64_t rank = static_cast<int64_t>(indices_shape.size());
  b.check(rank >= 1 && lut.rank() == rank + 2, "lut ", shape_str(lut.shape), " must have 2 more dims than indices ",
          shape_str(indices_shape));
  l.palettes = lut.shape[rank];
  l.vector = lut.shape[rank + 1];
  l.groups.assign(lut.shape.begin(), lut.shape.begin() + rank);
  check_blocks(b, indices_shape, l.groups, "lut");
  b.check(index_bits == 0 || l.palettes == (int64_t{1} << index_bits), "lut has ", l.palettes,
          " palettes but the indices are ", index_bits, "-bit");
  if (vector_axis) l.vector_axis = normalize_axis(b.const_int("vector_axis"), rank);
  else b.check(l.vector == 1, "vector_axis is required when the lut holds vectors (V = ", l.vector, ")");
  return l;
}

int index_bits(DType dtype) {
  switch (dtype) {
    case DType::UInt1: return 1;
    case DType::UInt2: return 2;
    case DType::UInt3: return 3;
    case DType::UInt4: return 4;
    case DType::UInt6: return 6;
    case DType::UInt8: return 8;
    default: return 0;
  }
}

Shape lut_output_shape(const Lut& l, Shape shape) {
  if (l.vector > 1) shape[l.vector_axis] *= l.vector;
  return shape;
}

Tensor lut_to_dense(const Lut& l, const uint8_t* indices, const Shape& shape) {
  const size_t row = static_cast<size_t>(l.vector) * dtype_size(l.lut.dtype);
  Shape with_vector = shape;
  with_vector.push_back(l.vector);
  Tensor rows = Tensor::empty(l.lut.dtype, with_vector);
  const char* table = static_cast<const char*>(l.lut.data);
  char* dst = static_cast<char*>(rows.data);
  for_each_grouped(shape, l.groups, [&](int64_t p, int64_t g) {
    const int64_t idx = indices[p];
    if (idx >= l.palettes) fail("lut index ", idx, " is out of range for ", l.palettes, " palettes");
    std::memcpy(dst + p * row, table + (g * l.palettes + idx) * row, row);
  });
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (l.vector == 1 || l.vector_axis == rank - 1) return rows.reshaped(lut_output_shape(l, shape));
  // Move the vector dim right after vector_axis, then merge the two.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d) {
    perm.push_back(d);
    if (d == l.vector_axis) perm.push_back(rank);
  }
  Tensor out = Tensor::empty(l.lut.dtype, lut_output_shape(l, shape));
  Shape permuted;
  for (int64_t p : perm) permuted.push_back(with_vector[p]);
  Tensor target = out.reshaped(permuted);
  permute_copy(rows, with_vector, perm, target);
  return out;
}

// out = scale[block] * (data - offset[block]) with arithmetic in the scale dtype (as
// coremltools does: data and offset are first cast to it).
Tensor shift_scale(const Tensor& data, const Tensor& scale, const Tensor& offset) {
  Tensor out = Tensor::empty(scale.dtype, data.shape);
  const std::vector<float> sc = floats(scale), off = offset.defined() ? floats(offset) : std::vector<float>(sc.size(), 0.f);
  dispatch_storage(data.dtype, [&](auto data_tag) {
    using D = typename decltype(data_tag)::type;
    const D* d = data.ptr<D>();
    if (scale.dtype == DType::Float16) {
      half* o = out.ptr<half>();
      for_each_grouped(data.shape, scale.shape, [&](int64_t p, int64_t g) {
        const half diff = static_cast<half>(static_cast<float>(static_cast<half>(d[p])) - static_cast<float>(static_cast<half>(off[g])));
        o[p] = static_cast<half>(static_cast<float>(diff) * sc[g]);
      });
    } else {
      float* o = out.ptr<float>();
      for_each_grouped(data.shape, scale.shape, [&](int64_t p, int64_t g) { o[p] = (static_cast<float>(d[p]) - off[g]) * sc[g]; });
    }
  });
  return out;
}

void check_shift_scale(const KernelBuilder& b, const Tensor& data, const Tensor& scale, const Tensor& offset) {
  b.check(scale.dtype == DType::Float16 || scale.dtype == DType::Float32, "scale must be fp16 or fp32");
  b.check(data.rank() >= 1, "data must have rank >= 1");
  check_blocks(b, data.shape, scale.shape, "scale");
  b.check(!offset.defined() || offset.shape == scale.shape, "offset must have the shape of scale");
}

// Values of `dense` where `mask` (same element count) is set, row-major.
Tensor select_masked(const Tensor& dense, const uint8_t* mask) {
  const int64_t n = dense.numel();
  int64_t set = 0;
  for (int64_t i = 0; i < n; ++i) set += mask[i] != 0;
  Tensor out = Tensor::empty(dense.dtype, {set});
  const size_t es = dtype_size(dense.dtype);
  char* dst = static_cast<char*>(out.data);
  for (int64_t i = 0; i < n; ++i)
    if (mask[i]) std::memcpy(dst, static_cast<const char*>(dense.data) + i * es, es), dst += es;
  return out;
}

std::unique_ptr<Kernel> affine_dequantize(KernelBuilder& b) {
  const Tensor q = param(b, "quantized_data"), zp = param(b, "zero_point"), scale = param(b, "scale");
  b.check(q.dtype == DType::UInt8 || q.dtype == DType::Int8, "quantized_data must be uint8 or int8");
  b.check(scale.dtype == DType::Float16 || scale.dtype == DType::Float32, "scale must be fp16 or fp32");
  const int64_t axis = q.rank() ? normalize_axis(b.const_int("axis", 0), q.rank()) : 0;
  const int64_t dim = q.rank() ? q.shape[axis] : 1;
  for (const Tensor* t : {&zp, &scale})
    b.check(t->numel() == 1 || t->numel() == dim, "scale and zero_point must be scalars or have ", dim, " entries");
  return make_kernel([=](KernelContext& ctx) {
    // Per-channel scale and zero point along axis (a scalar is repeated); computed in fp32.
    std::vector<float> sc = floats(scale), z = floats(zp);
    sc.resize(static_cast<size_t>(dim), sc[0]);
    z.resize(static_cast<size_t>(dim), z[0]);
    Tensor out = Tensor::empty(scale.dtype, q.shape);
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < q.rank(); ++d) inner *= q.shape[d];
    dispatch_storage(q.dtype, [&](auto tag) {
      using Q = typename decltype(tag)::type;
      const Q* src = q.ptr<Q>();
      for (int64_t i = 0, n = q.numel(); i < n; ++i) {
        const int64_t c = (i / inner) % dim;
        const float v = sc[c] * (static_cast<float>(src[i]) - z[c]);
        if (scale.dtype == DType::Float16) out.ptr<half>()[i] = static_cast<half>(v);
        else out.ptr<float>()[i] = v;
      }
    });
    ctx.set_output(0, std::move(out));
  });
}

std::unique_ptr<Kernel> constexpr_cast(KernelBuilder& b) {
  const Tensor source = param(b, "source_val");
  const std::string to = b.const_string("output_dtype");
  const DType dtype = b.output_type(0).dtype;
  b.check((to == "fp32" && dtype == DType::Float32) || (to == "fp16" && dtype == DType::Float16),
          "unsupported output_dtype '", to, "' for a ", dtype_name(dtype), " output");
  b.check(source.dtype == DType::Float16 || source.dtype == DType::Float32, "source_val must be fp16 or fp32");
  return make_kernel([=](KernelContext& ctx) {
    if (source.dtype == dtype) return ctx.set_output(0, source);
    Tensor out = Tensor::empty(dtype, source.shape);
    if (source.dtype == DType::Float16) half_to_float(source.ptr<half>(), out.ptr<float>(), source.numel());
    else float_to_half(source.ptr<float>(), out.ptr<half>(), source.numel());
    ctx.set_output(0, std::move(out));
  });
}

std::unique_ptr<Kernel> lut_to_dense_op(KernelBuilder& b) {
  const Tensor indices = param(b, "indices"), lut = param(b, "lut");
  if (b.constant("shape")) {  // iOS16: packed uint8 indices, a flat lut of 2^nbits entries
    const Shape shape = b.const_ints("shape");
    const int64_t palettes = lut.numel();
    int bits = 0;
    while ((int64_t{1} << bits) < palettes) ++bits;
    b.check(lut.rank() == 1 && (int64_t{1} << bits) == palettes && (bits == 1 || bits == 2 || bits == 4 || bits == 6 || bits == 8),
            "lut must hold 2, 4, 16, 64 or 256 entries, got ", shape_str(lut.shape));
    // The same as one iOS18 lut shared by the whole tensor.
    Lut l;
    l.palettes = palettes;
    l.groups = Shape(shape.size(), 1);
    Shape lut_shape = l.groups;
    lut_shape.insert(lut_shape.end(), {palettes, 1});
    l.lut = lut.reshaped(lut_shape);
    const std::vector<uint8_t> idx = unpack_bits(b, indices, shape_numel(shape), bits);
    return make_kernel([=](KernelContext& ctx) { ctx.set_output(0, lut_to_dense(l, idx.data(), shape)); });
  }
  const int bits = index_bits(indices.dtype);
  b.check(bits > 0, "indices must be uint1..uint8, not ", dtype_name(indices.dtype));
  const Lut l = read_lut(b, lut, indices.shape, bits, b.constant("vector_axis"));
  return make_kernel([=](KernelContext& ctx) { ctx.set_output(0, lut_to_dense(l, indices.ptr<uint8_t>(), indices.shape)); });
}

std::unique_ptr<Kernel> sparse_to_dense_op(KernelBuilder& b) {
  const Tensor data = param(b, "nonzero_data"), mask = param(b, "mask");
  b.check(data.rank() == 1, "nonzero_data must be 1-d, got ", shape_str(data.shape));
  if (b.constant("shape")) {  // iOS16: mask is a packed bit stream
    const Shape shape = b.const_ints("shape");
    const std::vector<uint8_t> bits = unpack_bits(b, mask, shape_numel(shape), 1);
    const Tensor dense = sparse_to_dense(b, data, bits.data(), shape);
    return make_kernel([=](KernelContext& ctx) { ctx.set_output(0, dense); });
  }
  check_mask(b, mask);
  const Tensor dense = sparse_to_dense(b, data, mask.ptr<uint8_t>(), mask.shape);
  return make_kernel([=](KernelContext& ctx) { ctx.set_output(0, dense); });
}

std::unique_ptr<Kernel> blockwise_shift_scale(KernelBuilder& b) {
  const Tensor data = param(b, "data"), scale = param(b, "scale");
  const Tensor offset = optional_param(b, "offset");
  check_shift_scale(b, data, scale, offset);
  return make_kernel([=](KernelContext& ctx) { ctx.set_output(0, shift_scale(data, scale, offset)); });
}

// (mask', values): the lut output in sparse form. mask' is the mask repeated V times along
// vector_axis; values are the dense lut output where mask' is set.
std::unique_ptr<Kernel> lut_to_sparse(KernelBuilder& b) {
  const Tensor mask = param(b, "indices_mask"), nonzero = param(b, "indices_nonzero_data"), lut = param(b, "lut");
  const int bits = index_bits(nonzero.dtype);
  b.check(bits > 0, "indices_nonzero_data must be uint1..uint8, not ", dtype_name(nonzero.dtype));
  check_mask(b, mask);
  const Lut l = read_lut(b, lut, mask.shape, bits, b.constant("vector_axis"));
  const Tensor indices = sparse_to_dense(b, nonzero, mask.ptr<uint8_t>(), mask.shape);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor dense = lut_to_dense(l, indices.ptr<uint8_t>(), mask.shape);
    Tensor out_mask = Tensor::empty(mask.dtype, dense.shape);
    std::vector<std::vector<int64_t>> index(mask.shape.size());  // repeat along vector_axis
    for (size_t d = 0; d < index.size(); ++d)
      for (int64_t i = 0; i < dense.shape[d]; ++i)
        index[d].push_back(static_cast<int64_t>(d) == l.vector_axis ? i / l.vector : i);
    gather_axes(mask, index, out_mask);
    ctx.set_output(1, select_masked(dense, out_mask.ptr<uint8_t>()));
    ctx.set_output(0, std::move(out_mask));
  });
}

std::unique_ptr<Kernel> sparse_blockwise_shift_scale(KernelBuilder& b) {
  const Tensor mask = param(b, "data_mask"), nonzero = param(b, "nonzero_data"), scale = param(b, "scale");
  const Tensor offset = optional_param(b, "offset");
  check_mask(b, mask);
  const Tensor dense = sparse_to_dense(b, nonzero, mask.ptr<uint8_t>(), mask.shape);
  check_shift_scale(b, dense, scale, offset);
  return make_kernel([=](KernelContext& ctx) {
    const Tensor values = shift_scale(dense, scale, offset);
    ctx.set_output(0, mask);
    ctx.set_output(1, select_masked(values, mask.ptr<uint8_t>()));
  });
}

}  // namespace

void register_constexpr_kernels(KernelRegistry& registry) {
  // The dtypes of the values decompressed: quantized_data, source_val, lut, nonzero_data,
  // data. Tables and sparse values are copied as bytes; shift/scale reads data through
  // dispatch_storage.
  // Each but constexpr_cast also has a packed form (constexpr_packed.h), which the planner
  // prefers when the op's result is a weight (src/runtime/plan.cc).
  // Each runs once, at load (OpTraits::evaluated_at_load).
  auto at_load = [](KernelRegistry::Entry& entry) -> KernelRegistry::Entry& {
    entry.traits.evaluated_at_load = true;
    return entry;
  };
  at_load(registry.add("constexpr_affine_dequantize", {DType::Int8, DType::UInt8}, affine_dequantize, 16)).packed =
      pack_affine_dequantize;
  at_load(registry.add("constexpr_cast", kFloat, constexpr_cast, 16));
  at_load(registry.add("constexpr_lut_to_dense", kAnyDType, lut_to_dense_op, 16)).packed = pack_lut_to_dense;
  at_load(registry.add("constexpr_sparse_to_dense", kAnyDType, sparse_to_dense_op, 16)).packed = pack_sparse_to_dense;
  at_load(registry.add("constexpr_blockwise_shift_scale", kStorageDTypes, blockwise_shift_scale, 18)).packed =
      pack_blockwise_shift_scale;
  at_load(registry.add("constexpr_lut_to_sparse", kAnyDType, lut_to_sparse, 18)).packed = pack_lut_to_sparse;
  at_load(registry.add("constexpr_sparse_blockwise_shift_scale", kStorageDTypes, sparse_blockwise_shift_scale, 18))
      .packed = pack_sparse_blockwise_shift_scale;
}

}  // namespace coremlrt::ops
