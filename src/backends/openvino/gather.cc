// Gathers and scatters by index tensors (our kernels: src/ops/gather.cc). Index rules are our
// kernels' (IndexRule there): gathers wrap a negative index (iOS17+ with validate_indices: only
// [0, D) is valid), scatters of iOS15/16 wrap one too and those of iOS17+ take [0, D) only.
// OpenVINO cannot report an index out of range, nor does it define the order in which a scatter
// applies updates to one position, so:
// * indices known at load must be in range, and a scatter's distinct, or the op stays ours;
// * indices computed at run time are checked by the region (Lowerer::require): a run with an
//   index out of range, or a scatter writing one position twice, drops OpenVINO's results and
//   runs the region's ops on our kernels, which report the index, or drop the update as iOS17+
//   scatters do, or apply repeated updates in order.
// A scatter then combines each position with one update, exactly as our kernel does: the old
// values are gathered, combined (add, sub, mul, div, max, min) and written with the scatter's
// update form. Comparisons of int32 indices with their bounds are exact here: the CPU plugin
// compares int32 values in fp32, which keeps their order, and bounds (dims) are below 2^24.
#include <openvino/op/ops.hpp>

#include <set>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

namespace {

namespace v1 = ov::op::v1;
namespace v3 = ov::op::v3;

// Where an index may lie: [-D, D) when negatives wrap, else [0, D).
bool negatives_wrap_in_gathers(const OpReader& op) {
  return op.ios_version() < 17 || !op.const_bool("validate_indices", false);
}
bool negatives_wrap_in_scatters(const OpReader& op) { return op.ios_version() < 17; }

// The dtypes of indices computed at run time that OpenVINO's index inputs take after a Convert.
Verdict index_dtype(const OpReader& op) {
  const DType d = op.type("indices").dtype;
  if (d == DType::Int32 || d == DType::Int16 || d == DType::UInt16 || d == DType::Int8 || d == DType::UInt8)
    return Verdict::claim();
  return Verdict::refuse("indices of dtype " + std::string(dtype_name(d)));
}

// Indices known at load, each checked against the size of the dim it indexes (dims[i % k]).
Verdict constant_indices_in_range(const OpReader& op, const std::vector<int64_t>& dims, bool wrap) {
  const std::vector<int64_t> indices = op.const_ints("indices");
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t size = dims[i % dims.size()];
    if (indices[i] < (wrap ? -size : 0) || indices[i] >= size) return Verdict::refuse("an index is out of range");
  }
  return Verdict::claim();
}

// The index tensor as i32 (or i64 as given), negatives wrapped by `sizes` (a scalar, or one size
// per entry of the last axis), with the region's check that each lies in range.
Value checked_indices(Lowerer& op, const Value& sizes, bool wrap) {
  Value indices = op.input("indices");
  if (indices.get_element_type() != ov::element::i32 && indices.get_element_type() != ov::element::i64)
    indices = std::make_shared<ov::op::v0::Convert>(indices, ov::element::i32);
  Value typed_sizes = converted(sizes, indices.get_element_type());
  Value zero = Lowerer::scalar_like(indices, 0.0);
  if (!op.constant("indices")) {
    Value low = wrap ? Value(std::make_shared<ov::op::v0::Negative>(typed_sizes)) : zero;
    Value in_range = std::make_shared<v1::LogicalAnd>(std::make_shared<v1::GreaterEqual>(indices, low),
                                                      std::make_shared<v1::Less>(indices, typed_sizes));
    Value flat = std::make_shared<v1::Reshape>(in_range, Lowerer::i64s({-1}), false);
    op.require(std::make_shared<v1::ReduceLogicalAnd>(flat, Lowerer::i64(0), false));
  }
  if (wrap) {
    Value shifted = std::make_shared<v1::Add>(indices, typed_sizes);
    indices = std::make_shared<v1::Select>(std::make_shared<v1::Less>(indices, zero), shifted, indices);
  }
  if (op.constant("indices")) return indices;
  // Clamped into [0, D): the CPU plugin's scatters throw on an index out of range, before the
  // region's check above can send the run to our kernels.
  Value last = std::make_shared<v1::Subtract>(typed_sizes, Lowerer::scalar_like(indices, 1.0));
  return std::make_shared<v1::Minimum>(std::make_shared<v1::Maximum>(indices, zero), last);
}

// The region's check that no two updates of a scatter land on one position: `counts` is a
// scatter of ones (with reduction "sum") into zeros over the positions indexed.
void require_distinct(Lowerer& op, const Value& counts) {
  Value flat = std::make_shared<v1::Reshape>(counts, Lowerer::i64s({-1}), false);
  Value most = std::make_shared<v1::ReduceMax>(flat, Lowerer::i64(0), false);
  op.require(std::make_shared<v1::LessEqual>(most, Lowerer::scalar_like(most, 1.0)));
}

Value filled(ov::element::Type type, const std::vector<int64_t>& shape, double value) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return Lowerer::constant_of(type, shape, std::vector<double>(n, value));
}

// data sliced to the leading `dims` on every axis but `axis` (indices of gather_along_axis may
// be shorter than data there, as torch.gather's are).
Value leading(const Value& data, const std::vector<int64_t>& data_dims, const std::vector<int64_t>& dims, int64_t axis) {
  std::vector<int64_t> stop = data_dims;
  bool sliced = false;
  for (size_t d = 0; d < dims.size(); ++d)
    if (static_cast<int64_t>(d) != axis && dims[d] != data_dims[d]) {
      stop[d] = dims[d];
      sliced = true;
    }
  if (!sliced) return data;
  std::vector<int64_t> start(dims.size(), 0), step(dims.size(), 1), axes(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) axes[d] = static_cast<int64_t>(d);
  return std::make_shared<ov::op::v8::Slice>(data, Lowerer::i64s(start), Lowerer::i64s(stop), Lowerer::i64s(step),
                                             Lowerer::i64s(axes));
}

// gather_along_axis (and scatter_along_axis): indices of x's rank, at most x's dims off the axis.
Verdict along_axis_shapes(const OpReader& op, const char* data) {
  const ir::ValueType& x = op.type(data);
  const ir::ValueType& indices = op.type("indices");
  const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
  if (axis < 0 || axis >= x.rank) return Verdict::refuse("axis out of range");
  if (indices.rank != x.rank) return Verdict::refuse("indices do not have x's rank");
  for (int64_t d = 0; d < x.rank; ++d)
    if (d != axis && indices.dims[d] > x.dims[d]) return Verdict::refuse("indices do not fit x");
  return Verdict::claim();
}

// ---- scatters

enum class Combine { Update, Add, Sub, Mul, Div, Max, Min };

std::optional<Combine> combine_mode(const OpReader& op) {
  const std::string mode = op.const_string("mode", "add");
  static const std::pair<const char*, Combine> kModes[] = {
      {"update", Combine::Update}, {"add", Combine::Add}, {"sub", Combine::Sub}, {"mul", Combine::Mul},
      {"div", Combine::Div},       {"max", Combine::Max}, {"min", Combine::Min}};
  for (auto& [name, mode_of] : kModes)
    if (mode == name) return mode_of;
  return std::nullopt;
}

// The mode and dtypes a scatter lowering takes: "update" moves values of any dtype; the
// arithmetic modes are exact for fp16/fp32 and, but for div (our kernel's integer division
// has its own rules at 0 and -1), for int32 (wrapping as ours does).
Verdict scatter_mode(const OpReader& op) {
  const std::optional<Combine> mode = combine_mode(op);
  if (!mode) return Verdict::refuse("mode " + op.const_string("mode", "add"));
  const DType d = op.type("data").dtype;
  if (op.type("updates").dtype != d) return Verdict::refuse("updates and data have different dtypes");
  if (*mode == Combine::Update || fp16_or_fp32(d) || (d == DType::Int32 && *mode != Combine::Div))
    return Verdict::claim();
  return Verdict::refuse("mode " + op.const_string("mode", "add") + " on " + dtype_name(d));
}

// Indices known at load: distinct positions (`positions` lists each update's, normalized).
Verdict distinct(const std::vector<std::vector<int64_t>>& positions) {
  std::set<std::vector<int64_t>> seen;
  for (const std::vector<int64_t>& p : positions)
    if (!seen.insert(p).second)
      return Verdict::refuse("two updates land on one position: OpenVINO does not define their order");
  return Verdict::claim();
}

// Each update combined with the value it replaces, as our kernel's combine(). On int32, max and
// min are OpenVINO's Maximum and Minimum, exact there, where its comparisons run in fp32 and round
// values above 2^24 (elementwise_binary.cc); on floats, the Select keeps our kernel's NaN rule.
Value combined(Combine mode, const Value& old, const Value& update) {
  const bool int32 = old.get_element_type() == ov::element::i32;
  if (int32 && mode == Combine::Max) return std::make_shared<v1::Maximum>(old, update);
  if (int32 && mode == Combine::Min) return std::make_shared<v1::Minimum>(old, update);
  switch (mode) {
    case Combine::Update: return update;
    case Combine::Add: return std::make_shared<v1::Add>(old, update);
    case Combine::Sub: return std::make_shared<v1::Subtract>(old, update);
    case Combine::Mul: return std::make_shared<v1::Multiply>(old, update);
    case Combine::Div: return std::make_shared<v1::Divide>(old, update);
    case Combine::Max: return std::make_shared<v1::Select>(std::make_shared<v1::Greater>(old, update), old, update);
    case Combine::Min: return std::make_shared<v1::Select>(std::make_shared<v1::Less>(old, update), old, update);
  }
  return update;
}

// Positions of a scatter's updates from indices known at load, normalized: for `scatter` and
// `scatter_nd` one tuple per update slice (its length `k`), for `scatter_along_axis` one per
// element (the index with its coordinates off the axis).
std::vector<std::vector<int64_t>> tuples(const std::vector<int64_t>& indices, size_t k, const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i + k <= indices.size(); i += k) {
    std::vector<int64_t> t(indices.begin() + i, indices.begin() + i + k);
    for (size_t j = 0; j < k; ++j)
      if (t[j] < 0) t[j] += dims[j];
    out.push_back(t);
  }
  return out;
}

Verdict check_scatter(const OpReader& op) {
  if (Verdict why = scatter_mode(op); !why.claimed) return why;
  const ir::ValueType& data = op.type("data");
  const int64_t axis = normalized_axis(op.const_int("axis", 0), data.rank);
  if (axis < 0 || axis >= data.rank) return Verdict::refuse("axis out of range");
  if (!op.constant("indices")) return index_dtype(op);
  if (Verdict why = constant_indices_in_range(op, {data.dims[axis]}, negatives_wrap_in_scatters(op)); !why.claimed)
    return why;
  return distinct(tuples(op.const_ints("indices"), 1, {data.dims[axis]}));
}

std::vector<Value> lower_scatter(Lowerer& op) {
  const ir::ValueType& data_type = op.type("data");
  const int64_t axis = normalized_axis(op.const_int("axis", 0), data_type.rank);
  const int64_t size = data_type.dims[axis];
  Value indices = checked_indices(op, Lowerer::i64(size), negatives_wrap_in_scatters(op));
  if (!op.constant("indices")) {
    Value flat = std::make_shared<v1::Reshape>(indices, Lowerer::i64s({-1}), false);
    const int64_t n = static_cast<int64_t>(shape_numel(op.type("indices").dims));
    require_distinct(op, std::make_shared<ov::op::v12::ScatterElementsUpdate>(
                             filled(ov::element::i32, {size}, 0), flat, filled(ov::element::i32, {n}, 1), Lowerer::i64(0),
                             ov::op::v12::ScatterElementsUpdate::Reduction::SUM));
  }
  Value data = op.input("data");
  Value update = op.input("updates");
  const Combine mode = *combine_mode(op);
  if (mode != Combine::Update)
    update = combined(mode, std::make_shared<ov::op::v8::Gather>(data, indices, Lowerer::i64(axis), 0), update);
  return {std::make_shared<v3::ScatterUpdate>(data, indices, update, Lowerer::i64(axis))};
}

Verdict check_scatter_along_axis(const OpReader& op) {
  if (Verdict why = scatter_mode(op); !why.claimed) return why;
  if (Verdict why = along_axis_shapes(op, "data"); !why.claimed) return why;
  if (op.type("updates").dims != op.type("indices").dims) return Verdict::refuse("updates do not have indices' shape");
  const ir::ValueType& data = op.type("data");
  const int64_t axis = normalized_axis(op.const_int("axis", 0), data.rank);
  if (!op.constant("indices")) return index_dtype(op);
  if (Verdict why = constant_indices_in_range(op, {data.dims[axis]}, negatives_wrap_in_scatters(op)); !why.claimed)
    return why;
  // Each element's position: its coordinates with the index in place of the axis coordinate.
  const std::vector<int64_t> indices = op.const_ints("indices");
  const std::vector<int64_t>& dims = op.type("indices").dims;
  std::vector<std::vector<int64_t>> positions;
  std::vector<int64_t> at(dims.size(), 0);
  for (int64_t index : indices) {
    std::vector<int64_t> p = at;
    p[axis] = index < 0 ? index + data.dims[axis] : index;
    positions.push_back(p);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++at[d] < dims[d]) break;
      at[d] = 0;
    }
  }
  return distinct(positions);
}

std::vector<Value> lower_scatter_along_axis(Lowerer& op) {
  const ir::ValueType& data_type = op.type("data");
  const int64_t axis = normalized_axis(op.const_int("axis", 0), data_type.rank);
  Value indices = checked_indices(op, Lowerer::i64(data_type.dims[axis]), negatives_wrap_in_scatters(op));
  const std::vector<int64_t>& index_dims = op.type("indices").dims;
  if (!op.constant("indices"))
    require_distinct(op, std::make_shared<ov::op::v12::ScatterElementsUpdate>(
                             filled(ov::element::i32, data_type.dims, 0), indices,
                             filled(ov::element::i32, index_dims, 1), Lowerer::i64(axis),
                             ov::op::v12::ScatterElementsUpdate::Reduction::SUM));
  Value data = op.input("data");
  Value update = op.input("updates");
  const Combine mode = *combine_mode(op);
  if (mode != Combine::Update) {
    Value old = std::make_shared<ov::op::v6::GatherElements>(leading(data, data_type.dims, index_dims, axis), indices, axis);
    update = combined(mode, old, update);
  }
  return {std::make_shared<ov::op::v12::ScatterElementsUpdate>(data, indices, update, Lowerer::i64(axis))};
}

// scatter_nd: index tuples of length k = indices' last dim, updates indices[:-1] + data[k:].
Verdict check_scatter_nd(const OpReader& op) {
  if (Verdict why = scatter_mode(op); !why.claimed) return why;
  const std::vector<int64_t>& data = op.type("data").dims;
  const std::vector<int64_t>& indices = op.type("indices").dims;
  if (indices.empty() || indices.back() > static_cast<int64_t>(data.size()) || indices.back() < 1)
    return Verdict::refuse("index tuples do not fit data");
  const size_t k = static_cast<size_t>(indices.back());
  std::vector<int64_t> expected(indices.begin(), indices.end() - 1);
  expected.insert(expected.end(), data.begin() + static_cast<int64_t>(k), data.end());
  if (op.type("updates").dims != expected) return Verdict::refuse("updates do not have the shape the indices give");
  if (!op.constant("indices")) return index_dtype(op);
  const std::vector<int64_t> dims(data.begin(), data.begin() + static_cast<int64_t>(k));
  if (Verdict why = constant_indices_in_range(op, dims, negatives_wrap_in_scatters(op)); !why.claimed) return why;
  return distinct(tuples(op.const_ints("indices"), k, dims));
}

std::vector<Value> lower_scatter_nd(Lowerer& op) {
  const std::vector<int64_t>& data_dims = op.type("data").dims;
  const std::vector<int64_t>& index_dims = op.type("indices").dims;
  const int64_t k = index_dims.back();
  const std::vector<int64_t> dims(data_dims.begin(), data_dims.begin() + k);
  Value indices = checked_indices(op, Lowerer::i64s(dims), negatives_wrap_in_scatters(op));
  if (!op.constant("indices"))
    require_distinct(op, std::make_shared<ov::op::v15::ScatterNDUpdate>(
                             filled(ov::element::i32, dims, 0), indices,
                             filled(ov::element::i32, std::vector<int64_t>(index_dims.begin(), index_dims.end() - 1), 1),
                             ov::op::v15::ScatterNDUpdate::Reduction::SUM));
  Value data = op.input("data");
  Value update = op.input("updates");
  const Combine mode = *combine_mode(op);
  if (mode != Combine::Update) update = combined(mode, std::make_shared<ov::op::v8::GatherND>(data, indices, 0), update);
  return {std::make_shared<ov::op::v15::ScatterNDUpdate>(data, indices, update)};
}

}  // namespace

void add_gather_lowerings(LoweringTable& t) {
  // OpenVINO's Gather yields zeros for an index outside [-D, D) where our kernel fails the
  // prediction (src/ops/gather.cc); inside it both wrap negative indices. Indices known at load
  // were checked when the op was folded, or are checked here; indices computed at run time (token
  // ids of an embedding) are checked by the region: a guard (Lowerer::require) sends a run with an
  // index out of range to our kernels, which report it. With validate_indices (iOS17+), negative
  // indices fail on our kernels too, which the guard does not say: such gathers stay ours.
  t["gather"] = {[](const OpReader& op) -> Verdict {
                   if (op.const_int("batch_dims", 0) != 0) return Verdict::refuse("batch_dims");
                   if (op.const_bool("validate_indices", false)) return Verdict::refuse("validate_indices");
                   const ir::ValueType& x = op.type("x");
                   const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                   if (axis < 0 || axis >= x.rank) return Verdict::refuse("axis out of range");
                   if (!op.constant("indices")) {
                     const DType d = op.type("indices").dtype;
                     if (d != DType::Int32 && d != DType::Int16 && d != DType::UInt16 && d != DType::Int8 && d != DType::UInt8)
                       return Verdict::refuse("indices of dtype " + std::string(dtype_name(d)));
                     return Verdict::claim();
                   }
                   for (int64_t i : op.const_ints("indices"))
                     if (i < -x.dims[axis] || i >= x.dims[axis]) return Verdict::refuse("an index is out of range");
                   return Verdict::claim();
                 },
                 [](Lowerer& op) -> std::vector<Value> {
                   const ir::ValueType& x = op.type("x");
                   const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                   Value indices = op.input("indices");
                   if (!op.constant("indices")) {
                     if (indices.get_element_type() != ov::element::i32 && indices.get_element_type() != ov::element::i64)
                       indices = std::make_shared<ov::op::v0::Convert>(indices, ov::element::i32);
                     const int64_t size = x.dims[axis];
                     auto bound = [&](int64_t v) {
                       return Lowerer::constant_of(indices.get_element_type(), {}, {static_cast<double>(v)});
                     };
                     Value in_range = std::make_shared<ov::op::v1::LogicalAnd>(
                         std::make_shared<v1::GreaterEqual>(indices, bound(-size)), std::make_shared<v1::Less>(indices, bound(size)));
                     Value flat = std::make_shared<v1::Reshape>(in_range, Lowerer::i64s({-1}), false);
                     op.require(std::make_shared<v1::ReduceLogicalAnd>(flat, Lowerer::i64(0), false));
                   }
                   // An fp16 table (an embedding) is gathered in fp16 and only the rows taken are
                   // widened: the table is not copied to fp32 in the compiled model.
                   Value table = op.stored("x");
                   Value rows = std::make_shared<ov::op::v8::Gather>(table, indices, Lowerer::i64(axis), 0);
                   if (rows.get_element_type() != op.compute_type(x.dtype))
                     rows = std::make_shared<ov::op::v0::Convert>(rows, op.compute_type(x.dtype));
                   return {rows};
                 }};
  t["gather_along_axis"] = {[](const OpReader& op) -> Verdict {
                              if (Verdict why = along_axis_shapes(op, "x"); !why.claimed) return why;
                              if (!op.constant("indices")) return index_dtype(op);
                              const ir::ValueType& x = op.type("x");
                              const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                              return constant_indices_in_range(op, {x.dims[axis]}, negatives_wrap_in_gathers(op));
                            },
                            [](Lowerer& op) -> std::vector<Value> {
                              const ir::ValueType& x = op.type("x");
                              const int64_t axis = normalized_axis(op.const_int("axis", 0), x.rank);
                              Value indices = checked_indices(op, Lowerer::i64(x.dims[axis]), negatives_wrap_in_gathers(op));
                              Value data = leading(op.input("x"), x.dims, op.type("indices").dims, axis);
                              return {std::make_shared<ov::op::v6::GatherElements>(data, indices, axis)};
                            }};
  // Tuples of the last dim of indices address x's dims batch_dims.. (output: indices[:-1] +
  // x[batch_dims + k:], as OpenVINO's GatherND-8 gives).
  t["gather_nd"] = {[](const OpReader& op) -> Verdict {
                      const std::vector<int64_t>& x = op.type("x").dims;
                      const std::vector<int64_t>& indices = op.type("indices").dims;
                      const int64_t batch_dims = op.const_int("batch_dims", 0);
                      if (indices.empty() || batch_dims < 0 || batch_dims >= static_cast<int64_t>(indices.size()))
                        return Verdict::refuse("indices do not fit batch_dims");
                      const int64_t k = indices.back();
                      if (k < 1 || batch_dims + k > static_cast<int64_t>(x.size()))
                        return Verdict::refuse("index tuples do not fit x");
                      for (int64_t d = 0; d < batch_dims; ++d)
                        if (x[d] != indices[d]) return Verdict::refuse("batch dims of x and indices differ");
                      if (!op.constant("indices")) return index_dtype(op);
                      return constant_indices_in_range(op, std::vector<int64_t>(x.begin() + batch_dims, x.begin() + batch_dims + k),
                                                       negatives_wrap_in_gathers(op));
                    },
                    [](Lowerer& op) -> std::vector<Value> {
                      const std::vector<int64_t>& x = op.type("x").dims;
                      const int64_t batch_dims = op.const_int("batch_dims", 0);
                      const int64_t k = op.type("indices").dims.back();
                      Value indices = checked_indices(
                          op, Lowerer::i64s(std::vector<int64_t>(x.begin() + batch_dims, x.begin() + batch_dims + k)),
                          negatives_wrap_in_gathers(op));
                      return {std::make_shared<ov::op::v8::GatherND>(op.input("x"), indices, batch_dims)};
                    }};
  t["scatter"] = {check_scatter, lower_scatter};
  t["scatter_along_axis"] = {check_scatter_along_axis, lower_scatter_along_axis};
  t["scatter_nd"] = {check_scatter_nd, lower_scatter_nd};
}

}  // namespace coremlrt::backends::openvino
