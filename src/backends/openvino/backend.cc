// The OpenVINO backend: which ops it takes (propose), whether a region pays for itself
// (worth_running), and the lowering of a region into a compiled model (compile). The compiled
// kernel is in region_kernel.cc.
#include <openvino/core/model.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/logical_and.hpp>
#include <openvino/op/parameter.hpp>
#include <openvino/op/result.hpp>
#include <openvino/runtime/core.hpp>
#include <openvino/runtime/properties.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "backends/openvino/lowering.h"
#include "backends/openvino/openvino_backend.h"
#include "backends/openvino/region_cache.h"
#include "backends/openvino/region_kernel.h"
#include "format/blob_file.h"
#include "ops/packed_weight.h"
#include "ops/util.h"

namespace ov {
// Exported by libopenvino (transformations/rt_info/decompression.hpp, not among the SDK's
// headers): marks a Convert of a constant as weight decompression.
void mark_as_decompression(const std::shared_ptr<Node>& node);
}  // namespace ov

namespace coremlrt::backends::openvino {

namespace {

// Whether a packed constant reaches the plugin decoded rather than as its decompression pattern
// (RegionBuilder::value_of): a form OpenVINO has no kernels for, or a convolution's weight (its
// convolutions take no compressed weights). The memory rule and decoded_constants count the same.
bool reaches_plugin_decoded(const ir::PackedTensor& packed, bool read_by_convolution) {
  return !packed_decompresses(packed) || read_by_convolution;
}

// fp16 constants of at least this many elements reach an fp32 region as fp16 views
// (RegionBuilder::dense_constant); smaller ones are widened, which costs nothing worth a node.
constexpr int64_t kDecompressedElements = 1024;

// The cost rule of backend "auto", from measurements on this project's 2-core machine
// (docs/reports/performance.md, "Measurements behind code choices"): one OpenVINO call costs
// more than our kernels on a tiny input; plain fp32 elementwise work runs at about the same speed
// on either once it is large, while every matrix op, convolution and recurrent layer is faster
// there. So a region goes to OpenVINO when it does at least kMinRegionMacs multiply-adds or
// produces at least kMinRegionElements values.
// The element threshold stays high on purpose: an elementwise fp16 region on OpenVINO computes in
// fp32 (fp16 or wider, docs/design/architecture.md law 6) where Core ML's own results, and our kernels,
// round every op to fp16; a model made only of such ops keeps Core ML's exact results here.
// (Measured cost of that choice: the fp16 -> fp32 casts of the KV cache in
// benchmarks/peer_models.py's GPT-2 decode step, 786432 values each, stay on our kernels.)
constexpr double kMinRegionMacs = 1 << 16;
constexpr double kMinRegionElements = 1 << 22;

// Whether a value of `type` can cross into or out of an OpenVINO region: a tensor of known rank,
// non-empty, with an element type we map, and of static shape unless `any_dims` (the lowerings
// of lowering.h that read ranks only: OpenVINO then infers the dims at each prediction).
Verdict crossable(const ir::ValueType& type, bool any_dims) {
  if (type.kind != ir::TypeKind::Tensor)
    return Verdict::refuse("a value of type " + type.str() + " (not a tensor)");
  if (static_cast<int64_t>(type.dims.size()) != type.rank) return Verdict::refuse("a value of unknown rank " + type.str());
  if (!any_dims && !type.is_static()) return Verdict::refuse("a value of dynamic shape " + type.str());
  for (int64_t d : type.dims)
    if (d == 0) return Verdict::refuse("an empty tensor " + type.str());
  if (!element_type(type.dtype)) return Verdict::refuse("dtype " + std::string(dtype_name(type.dtype)));
  return Verdict::claim();
}

Verdict support(const ir::Operation& op, const ValueInfo& values, int ios_version) {
  auto it = lowerings().find(op.type);
  if (it == lowerings().end()) {
    auto why = unlowered_reasons().find(op.type);
    return Verdict::refuse("no lowering for op type '" + op.type + "'" +
                           (why == unlowered_reasons().end() ? std::string() : ": " + why->second));
  }
  const bool any_dims = it->second.any_dims;
  for (const ir::NamedValue& out : op.outputs) {
    Verdict why = crossable(out.type, any_dims);
    if (!why.claimed) return Verdict::refuse("output '" + out.name + "' is " + why.reason);
  }
  for (const auto& [param, bindings] : op.inputs)
    for (const ir::Binding& binding : bindings) {
      if (const ir::ConstValue* constant = values.constant(binding)) {
        if (!constant->packed) continue;
        Verdict why = packed_support(op, *constant->packed);
        if (!why.claimed) return Verdict::refuse("input '" + param + "' " + why.reason);
        continue;
      }
      Verdict why = crossable(values.type(binding), any_dims);
      if (!why.claimed) return Verdict::refuse("input '" + param + "' is " + why.reason);
    }
  if (!it->second.check) return Verdict::claim();
  try {
    return it->second.check(OpReader(op, values, ios_version));
  } catch (const Error& e) {
    return Verdict::refuse(e.what());
  }
}

// The cost rule's stand-in for a dim known only at prediction (a flexible input's height, say):
// regions are planned at load, before any size is seen.
constexpr double kAssumedDynamicExtent = 16;

// Elements of a value of `type`, each unknown dim counted as kAssumedDynamicExtent.
double numel(const ir::ValueType& type) {
  double n = 1;
  for (int64_t d : type.dims) n *= d < 0 ? kAssumedDynamicExtent : static_cast<double>(d);
  return n;
}

double extent(int64_t dim) { return dim < 0 ? kAssumedDynamicExtent : static_cast<double>(dim); }

// Multiply-adds of the matrix, convolution and recurrent ops; 0 for every other op.
double macs(const ir::Operation& op, const ValueInfo& values) {
  const double out = op.outputs.empty() ? 0 : numel(op.outputs[0].type);
  auto input = [&](const char* param) -> const ir::ValueType* {
    auto it = op.inputs.find(param);
    return it == op.inputs.end() || it->second.empty() ? nullptr : &values.type(it->second[0]);
  };
  if (op.type == "lstm") {
    // Per step, four gates of [batch, H] from [batch, I + H].
    const ir::ValueType* w = input("weight_ih");
    const ir::ValueType* x = input("x");
    if (w && x && w->rank == 2 && x->rank == 3)
      return extent(x->dims[0]) * extent(x->dims[1]) * static_cast<double>(w->dims[0]) *
             static_cast<double>(w->dims[1] + w->dims[0] / 4);
  }
  if (op.type == "linear" || op.type == "matmul" || op.type == "conv") {
    // Each output element is a dot product over the reduced extent.
    if (op.type == "linear") {
      if (const ir::ValueType* w = input("weight"); w && w->rank == 2) return out * extent(w->dims[1]);
    } else if (op.type == "conv") {
      if (const ir::ValueType* w = input("weight"); w && w->rank >= 3) return out * numel(*w) / extent(w->dims[0]);
    } else if (const ir::ValueType* x = input("x"); x && x->rank >= 1) {
      return out * extent(x->dims.back());  // the reduced extent, or the other dim when transposed
    }
  }
  return 0;
}

// Rows of the left operand of a linear or matmul op, per product (batch dims not counted for
// matmul); -1 for any other op.
int64_t matrix_rows(const ir::Operation& op, const ValueInfo& values) {
  auto it = op.inputs.find("x");
  if (it == op.inputs.end() || it->second.empty()) return -1;
  const ir::ValueType& x = values.type(it->second[0]);
  if (x.dims.empty()) return 1;
  if (op.type == "linear") return static_cast<int64_t>(numel(x) / extent(x.dims.back()));
  if (op.type != "matmul") return -1;
  if (x.dims.size() == 1) return 1;
  bool transpose_x = false;
  if (auto t = op.inputs.find("transpose_x"); t != op.inputs.end() && !t->second.empty())
    if (const ir::ConstValue* v = values.constant(t->second[0]); v && v->tensor.defined() && v->tensor.numel() == 1)
      transpose_x = *static_cast<const uint8_t*>(v->tensor.data) != 0;
  return static_cast<int64_t>(extent(transpose_x ? x.dims.back() : x.dims[x.dims.size() - 2]));
}

// The cost rule's exception for matrix-vector work (a decode step of a language model): a region
// whose only multiply-adds are linear or matmul products of at most kMaxVectorRows rows, each
// reading its weight either
// - in fp16 (an fp16 program computed in fp32, backend.cc, RegionBuilder): memory-bound, and
//   OpenVINO reads such weights widened to fp32 where our GEMM reads fp16: twice the bytes;
//   gpt2_decode fp16 runs faster on our kernels alone than with all-OpenVINO regions. (Keeping
//   the fp16 weights behind a Convert marked as decompression, rt_info "decompression", did not
//   help with this CPU plugin; docs/reports/performance.md, "Measurements behind code choices".)
// - or in fp32 (an fp32 program): our kernels read the mapped weights at about OpenVINO's speed
//   over its repacked copy (gpt2_decode fp32, 2 threads: 10.6 against 11.1 ms; 1 thread: 15.9
//   against 15.1 ms), without that copy's memory; and where the copies limit gave OpenVINO only
//   some of a decoder's layers, the step ran slower than either backend alone (11.9 and 17.2 ms:
//   docs/reports/performance.md, "Measurements behind code choices");
// - or compressed (a packed constant, any program), for one row: our kernels decode its codes in
//   registers (src/ops/packed_dot_x86.cc, where the CPU and the form allow) about as fast as OpenVINO's compressed kernels (int4 per block) or
//   a little slower (int8 per channel, whose values ours round to fp16 as the folded weight holds
//   them), and OpenVINO would hold a repacked copy of the weight and its runtime beside the
//   mapped file: about twice the memory (docs/design/compressed-weights.md).
// Recurrent layers and convolutions are not matrix-vector work of this kind (lstm ops stay on
// our kernels for their own reason: propose).
constexpr int64_t kMaxVectorRows = 4;

bool only_matrix_vector_work(const Region& region) {
  bool any = false;
  for (const ir::Operation* op : region.ops) {
    if (macs(*op, region.values) == 0) continue;
    const int64_t rows = matrix_rows(*op, region.values);
    if (rows < 0 || rows > kMaxVectorRows) return false;
    auto weight = op->inputs.find(op->type == "linear" ? "weight" : "y");
    if (weight != op->inputs.end() && !weight->second.empty())
      if (const ir::ConstValue* w = region.values.constant(weight->second[0]); w && w->packed) {
        // Where this CPU has no such loops (AVX2 only), or for forms they do not take, our
        // kernels decode panels, slower than OpenVINO's compressed kernels.
        if (rows != 1 || !ops::PackedMatrix::decodes_in_registers(*w->packed)) return false;
        any = true;
        continue;
      }
    auto x = op->inputs.find("x");
    const DType dtype = region.values.type(x->second[0]).dtype;
    if (dtype != DType::Float16 && dtype != DType::Float32) return false;
    any = true;
  }
  return any;
}

// Whether every weight of a recurrent op is an fp32 constant.
bool fp32_weights(const ir::Operation& op, const ValueInfo& values) {
  bool any = false;
  for (const auto& [param, bindings] : op.inputs) {
    if (param.rfind("weight_", 0) != 0) continue;
    for (const ir::Binding& binding : bindings) {
      const ir::ConstValue* w = values.constant(binding);
      if (!w || w->packed || !w->tensor.defined() || w->tensor.dtype != DType::Float32) return false;
      any = true;
    }
  }
  return any;
}

class OpenVinoBackend final : public Backend {
 public:
  explicit OpenVinoBackend(const BackendOptions& options) : options_(options) {}

  const std::string& name() const override {
    static const std::string kName = "openvino";
    return kName;
  }

  std::vector<Verdict> propose(const FunctionView& view) const override {
    std::vector<Verdict> verdicts;
    for (const ir::Operation* op : view.ops) {
      // Our LSTM kernel (src/ops/recurrent.cc: one pass over the recurrent weight's rows per
      // step, the gates activated where they are computed) is as fast as OpenVINO's LSTM
      // sequence on fp32 weights and reads them where the file maps them, where OpenVINO holds
      // copies. Not on fp16 weights (OpenVINO is faster there, and with bf16 in the
      // low-precision mode): docs/reports/performance.md, "Measurements behind code choices".
      if (!options_.force && !options_.low_precision && op->type == "lstm" && fp32_weights(*op, view.values)) {
        verdicts.push_back(Verdict::refuse("our LSTM kernel runs it as fast, reading the mapped fp32 weights where "
                                           "OpenVINO would copy them (backend=\"auto\"; backend=\"openvino\" "
                                           "forces it)"));
        continue;
      }
      verdicts.push_back(support(*op, view.values, view.function.ios_version));
    }
    return verdicts;
  }

  Verdict worth_running(const Region& region) const override {
    // Weights live once, forced or not (docs/design/compressed-weights.md): only the caller's
    // weight_copies_limit_bytes lets OpenVINO hold a copy per loaded function.
    if (options_.shares_weights)
      return Verdict::refuse("this function reads weights that other functions of its package read too: OpenVINO "
                             "would hold copies of them for each loaded function, and its runtime besides, where our "
                             "kernels read the one mapping they share (weight_copies_limit_bytes set lifts this)");
    if (options_.force) return Verdict::claim();
    if (Verdict pays = pays_for_a_call(region); !pays.claimed) return pays;
    // The memory rule (docs/design/compressed-weights.md): OpenVINO's CPU plugin keeps weights in
    // copies of its own, repacked for its kernels, beside the weight file we map: fp32 copies of
    // fp16 weights (docs/reports/performance.md, "Measurements behind code choices"), repacked
    // int8 and int4 ones, convolution weights decoded for it. The
    // regions of one load may hold such copies up to a limit; past it a region stays on our
    // kernels, which read every weight as the file stores it.
    const uint64_t copies = weight_copy_bytes(region);
    const uint64_t limit = options_.weight_copies_limit;
    if (copies == 0) return Verdict::claim();

    uint64_t used = copies_used_.load();
    while (used + copies <= limit && !copies_used_.compare_exchange_weak(used, used + copies)) {
    }
    if (used + copies <= limit) return Verdict::claim();
    return Verdict::refuse("OpenVINO would hold " + std::to_string(copies >> 20) +
                           " MiB of copies of the region's weights, past the limit of " + std::to_string(limit >> 20) +
                           " MiB of weight copies for this model (weight_copies_limit_bytes; backend=\"openvino\" "
                           "forces it)");
  }

  // Whether a region does enough work to pay for OpenVINO's per-call cost (refused with why not).
  Verdict pays_for_a_call(const Region& region) const {
    double total_macs = 0, elements = 0;
    for (const ir::Operation* op : region.ops) {
      total_macs += macs(*op, region.values);
      for (const ir::NamedValue& out : op->outputs) elements += numel(out.type);
    }
    if (!options_.low_precision && only_matrix_vector_work(region))
      return Verdict::refuse("every multiply-add of the region is in matrix-vector products (at most " +
                             std::to_string(kMaxVectorRows) +
                             " rows), which our kernels run reading the weights as stored: OpenVINO would hold copies of "
                             "them, fp16 ones widened to fp32 (backend=\"auto\"; backend=\"openvino\" forces it)");
    if (total_macs >= kMinRegionMacs || elements >= kMinRegionElements) return Verdict::claim();
    return Verdict::refuse("the region does about " + std::to_string(static_cast<int64_t>(total_macs)) +
                           " multiply-adds over " + std::to_string(static_cast<int64_t>(elements)) +
                           " elements, too little to pay for a backend call (backend=\"auto\"; "
                           "backend=\"openvino\" forces it)");
  }

  std::unique_ptr<ops::Kernel> compile(const Region& region) const override;
  std::vector<std::pair<const ir::ConstValue*, std::string>> decoded_constants(const Region& region) const override;

 private:
  // Bytes the compiled region's weight copies add to the process: fp32 for compressed weights
  // decoded for it (RegionBuilder::value_of), the stored size for affine compressed weights of
  // matrix products, which OpenVINO repacks; for dense weights, the copy less the weight file's
  // pages it replaces (fp16 widened to fp32: their size; fp32: nothing); each constant once.
  // Small constants (biases, norms: under 4,096 elements) are not weights worth counting.
  uint64_t weight_copy_bytes(const Region& region) const {
    const bool released = !shares_large_constants(region);
    std::set<const ir::ConstValue*> seen;
    uint64_t bytes = 0;
    for (const ir::Operation* op : region.ops)
      for (const auto& [param, bindings] : op->inputs)
        for (const ir::Binding& binding : bindings) {
          const ir::ConstValue* c = region.values.constant(binding);
          if (!c || !seen.insert(c).second || c->type.kind != ir::TypeKind::Tensor) continue;
          const uint64_t n = static_cast<uint64_t>(shape_numel(c->tensor.shape));
          if (n < 4096) continue;
          // A decoded weight (any form a convolution reads, palettes, sparse) is repacked in fp32.
          if (c->packed) {
            bytes += reaches_plugin_decoded(*c->packed, op->type == "conv") ? n * 4 : c->packed->stored_bytes();
            continue;
          }
          // A dense weight's pages of the weight file are dropped once the region is compiled
          // (release_constant_pages), unless ops outside it read them too: the copy then takes
          // their place, and only what it adds counts (an fp16 weight widened to fp32: its size).
          const uint64_t stored = n * dtype_size(c->tensor.dtype);
          if (c->tensor.dtype == DType::Float16) bytes += (options_.low_precision ? n * 2 : n * 4) - (released ? stored : 0);
          else if (c->tensor.dtype == DType::Float32) bytes += released ? 0 : stored;
        }
    return bytes;
  }

  BackendOptions options_;
  mutable std::atomic<uint64_t> copies_used_{0};
};

// Builds the region's graph: parameters for its inputs, constants (views of the plan's
// constants, not copies) for values known at load, and each op's lowering in order.
//
// fp16 values are computed in fp32 (the region's inputs, constants and outputs converted at its
// edges) unless `keep_fp16`: then OpenVINO sees the fp16 program as it is and its bf16 inference
// precision applies (the low-precision mode). Converting the edges ourselves matters for speed:
// given fp16 constants, the CPU plugin keeps them as fp16 and converts them at every inference.
class RegionBuilder {
 public:
  // `spill_dir`: where decoded weights may be kept in an unnamed file (decoded_for_plugin).
  // `release_sources`: no op outside the region reads its constants (shares_large_constants), so
  // a packed weight's pages may leave memory once decoded.
  RegionBuilder(const Region& region, bool keep_fp16, std::string spill_dir, bool release_sources)
      : region_(region), keep_fp16_(keep_fp16), spill_dir_(std::move(spill_dir)), release_sources_(release_sources) {}

  // Whether the built model has the guard output of Lowerer::require.
  bool guarded() const { return guarded_; }
  // The decoded weights kept in files (decoded_for_plugin), whose pages may leave memory once
  // the region is compiled.
  const std::vector<Tensor>& spilled() const { return spilled_; }

  ov::element::Type compute_type(DType dtype) const {
    return dtype == DType::Float16 && !keep_fp16_ ? ov::element::f32 : *element_type(dtype);
  }

  std::shared_ptr<ov::Model> build(std::vector<Tensor>& kept_constants) {
    ov::ParameterVector parameters;
    for (const ir::NamedValue& input : region_.inputs) {
      const ov::element::Type type = *element_type(input.type.dtype);
      auto parameter = std::make_shared<ov::op::v0::Parameter>(
          type, ov::PartialShape(std::vector<ov::Dimension>(input.type.dims.begin(), input.type.dims.end())));
      parameter->set_friendly_name(input.name);
      parameters.push_back(parameter);
      Value value = parameter->output(0);
      if (compute_type(input.type.dtype) != type) value = std::make_shared<ov::op::v0::Convert>(value, compute_type(input.type.dtype));
      graph_[input.name] = value;
    }
    for (const ir::Operation* op : region_.ops) lower(*op);
    ov::ResultVector results;
    for (const ir::NamedValue& output : region_.outputs) {
      Value value = graph_.at(output.name);
      const ov::element::Type type = *element_type(output.type.dtype);
      if (value.get_element_type() != type) value = std::make_shared<ov::op::v0::Convert>(value, type);
      results.push_back(std::make_shared<ov::op::v0::Result>(value));
    }
    // The conditions of Lowerer::require, all in one boolean scalar after the region's outputs
    // (region_kernel.h).
    guarded_ = !guards_.empty();
    if (guarded_) {
      Value all = guards_[0];
      for (size_t i = 1; i < guards_.size(); ++i) all = std::make_shared<ov::op::v1::LogicalAnd>(all, guards_[i]);
      results.push_back(std::make_shared<ov::op::v0::Result>(all));
    }
    kept_constants = std::move(kept_);
    return std::make_shared<ov::Model>(results, parameters, region_.function.name);
  }

 private:
  class OpLowerer final : public Lowerer {
   public:
    OpLowerer(const ir::Operation& op, RegionBuilder& builder)
        : Lowerer(op, builder.region_.values, builder.region_.function.ios_version), builder_(builder) {}
    Value input(const std::string& param, size_t index) override { return builder_.value_of(binding(param, index)); }
    Value stored(const std::string& param) override { return builder_.stored(binding(param, 0)); }
    void require(const Value& condition) override { builder_.guards_.push_back(condition); }
    ov::element::Type compute_type(DType dtype) const override { return builder_.compute_type(dtype); }

   private:
    RegionBuilder& builder_;
  };

  Value value_of(const ir::Binding& binding) {
    if (!binding.value) {
      auto it = graph_.find(binding.name);
      if (it != graph_.end()) return it->second;
    }
    const ir::ConstValue* constant = region_.values.constant(binding);
    if (!constant) fail("value '", binding.name, "' is neither computed in the region nor an input of it");
    Value node;
    if (constant->packed && reaches_plugin_decoded(*constant->packed, read_by_convolution(*constant))) {
      // Decoded here: OpenVINO has no kernels for its form, or reads it in a convolution, which
      // takes no compressed weights. As a dense constant (the program's dtype) it reaches the
      // plugin as a stored fp16 weight does (dense_constant: behind a Convert marked as weight
      // decompression); the decompression pattern, or an unmarked Convert, was folded by the
      // plugin into an fp32 copy that lived beside its repacked one (resnet18 int8: 135 MB
      // anonymous after load against fp16's 80; docs/design/compressed-weights.md).
      node = dense_constant(decoded_for_plugin(*constant->packed), binding.name);
    } else if (constant->packed) {
      node = packed_constant(*constant->packed, compute_type(constant->packed->dtype), kept_);
    } else {
      node = dense_constant(constant->tensor, binding.name);
    }
    if (!binding.value) graph_[binding.name] = node;
    return node;
  }

  // The values of a packed constant that the plugin reads dense. The plugin keeps the constant
  // as long as the compiled model but reads it only while compiling (it repacks the weights into
  // its own layout), so where an unnamed file can be made (BlobFile::spill: beside the cache, or
  // in the temporary directory, on a disk) the values live there, mapped as a weight file is,
  // and their pages leave this process once the region is compiled (spilled()); a later read
  // maps them again. Otherwise engine memory holds them: resnet18 int4 on OpenVINO then took
  // its fp16 weight bytes more than the fp16 model (docs/design/compressed-weights.md).
  Tensor decoded_for_plugin(const ir::PackedTensor& packed) {
    const Shape shape = packed.value_shape();
    const size_t bytes = dtype_size(packed.dtype) * static_cast<size_t>(shape_numel(shape));
    std::shared_ptr<format::BlobFile> file = format::BlobFile::spill(spill_dir_, bytes, [&](uint8_t* data) {
      ops::decode_dense_into(packed, Tensor::view(packed.dtype, shape, data, nullptr));
    });
    Tensor decoded = file ? file->read_raw(0, packed.dtype, shape) : ops::decode_dense(packed);
    if (file) spilled_.push_back(decoded);
    // The codes were read once, here: their pages need not stay while the region compiles (a
    // later reader maps them again from the weight file).
    if (release_sources_)
      for (const Tensor* t : {&packed.codes.data, &packed.offset.data, &packed.mask, &packed.table, &packed.scale})
        if (t->defined()) format::BlobFile::release_pages(t->data, t->nbytes());
    return decoded;
  }

  // Whether a convolution of the region reads `constant` as its weight.
  bool read_by_convolution(const ir::ConstValue& constant) const {
    for (const ir::Operation* op : region_.ops) {
      if (op->type != "conv") continue;
      auto weight = op->inputs.find("weight");
      if (weight != op->inputs.end() && !weight->second.empty() &&
          region_.values.constant(weight->second[0]) == &constant)
        return true;
    }
    return false;
  }

  // A constant stored dense: a view of it, or its fp16 values widened to the fp32 the region computes in.
  Value dense_constant(const Tensor& t, const std::string& name) {
    std::optional<ov::element::Type> type = element_type(t.dtype);
    if (!type || !t.defined()) fail("constant '", name, "' has dtype ", dtype_name(t.dtype), ", which has no OpenVINO type");
    Value node;
    if (compute_type(t.dtype) != *type && t.numel() >= kDecompressedElements) {
      // A large fp16 constant computed in fp32: a view of it (in the mapped weight file),
      // widened by a Convert marked as weight decompression, as OpenVINO's IR reader marks
      // fp16-compressed weights. Unmarked, the plugin folded the Convert into an fp32 copy that
      // lived as long as the compiled model, beside its own repacked weights: a 6-layer decoder's
      // fp16 function took 5 times its weight bytes, 3 times marked (docs/reports/performance.md,
      // "Measurements behind code choices"). The plugin folds the marks it does not use itself.
      ov::Tensor view(*type, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
      kept_.push_back(t);
      auto convert = std::make_shared<ov::op::v0::Convert>(std::make_shared<ov::op::v0::Constant>(view), ov::element::f32);
      ov::mark_as_decompression(convert);
      node = convert;
    } else if (compute_type(t.dtype) != *type) {
      // fp16 computed in fp32: the constant widened once, here, with the vectorized conversion
      // (an element-by-element loop took most of resnet18 fp16's cached load).
      auto widened = std::make_shared<ov::op::v0::Constant>(ov::element::f32, ov::Shape(t.shape.begin(), t.shape.end()));
      half_to_float(t.ptr<half>(), const_cast<float*>(widened->get_data_ptr<float>()), t.numel());
      node = widened;
    } else {
      // A view of the plan's constant (weights stay in the memory-mapped weight file); the
      // kernel keeps the tensor, and so its storage, alive as long as the compiled model.
      ov::Tensor view(*type, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
      node = std::make_shared<ov::op::v0::Constant>(view);
      kept_.push_back(t);
    }
    return node;
  }

  // An fp16 constant of a region computed in fp32 as a view in fp16 (shared by its readers);
  // value_of() for every other value.
  Value stored(const ir::Binding& binding) {
    const ir::ConstValue* constant = region_.values.constant(binding);
    if (!constant || constant->packed || !constant->tensor.defined() || constant->tensor.dtype != DType::Float16 ||
        compute_type(DType::Float16) == ov::element::f16)
      return value_of(binding);
    const std::string key = binding.value ? std::string() : binding.name;
    if (!key.empty()) {
      auto it = stored_.find(key);
      if (it != stored_.end()) return it->second;
    }
    const Tensor& t = constant->tensor;
    ov::Tensor view(ov::element::f16, ov::Shape(t.shape.begin(), t.shape.end()), t.data);
    kept_.push_back(t);
    Value node = std::make_shared<ov::op::v0::Constant>(view);
    if (!key.empty()) stored_[key] = node;
    return node;
  }

  void lower(const ir::Operation& op) {
    const OpLowering& lowering = lowerings().at(op.type);
    OpLowerer lowerer(op, *this);
    std::vector<Value> outputs = lowering.lower(lowerer);
    COREMLRT_CHECK(outputs.size() == op.outputs.size(), op.describe(), ": lowered to ", outputs.size(),
                   " outputs; the op has ", op.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const ir::ValueType& declared = op.outputs[i].type;
      const ov::PartialShape& shape = outputs[i].get_partial_shape();
      const ov::element::Type type = outputs[i].get_element_type();
      // The lowering must give exactly what the program declares; otherwise its semantics
      // differ from our kernel's and the region stays ours. A dim the program knows only at
      // prediction may be anything here; one OpenVINO knows only then is checked by the region
      // kernel at each prediction (region_kernel.cc).
      bool same = shape.rank().is_static() && type == compute_type(declared.dtype) &&
                  shape.rank().get_length() == static_cast<int64_t>(declared.dims.size());
      for (size_t d = 0; same && d < declared.dims.size(); ++d)
        same = declared.dims[d] < 0 || shape[d].is_dynamic() || shape[d].get_length() == declared.dims[d];
      COREMLRT_CHECK(same, op.describe(), ": lowered to ", type.get_type_name(), " ", shape.to_string(),
                     " but the program declares ", declared.str());
      graph_[op.outputs[i].name] = outputs[i];
    }
  }

  const Region& region_;
  const bool keep_fp16_;
  const std::string spill_dir_;
  const bool release_sources_;
  bool guarded_ = false;
  std::map<std::string, Value> graph_;
  std::map<std::string, Value> stored_;  // fp16 views of constants, by name
  std::vector<Value> guards_;  // Lowerer::require's conditions
  std::vector<Tensor> kept_;
  std::vector<Tensor> spilled_;  // decoded_for_plugin's values in files
};

// A model loaded for fewer threads than the machine has cores shares the machine with other
// work: a Dask worker or Ray actor per core, several serving processes. The CPU plugin pins each
// stream's threads to cores, counting from the first, and processes do not coordinate: two
// one-thread processes both run on core 0 (docs/reports/performance.md, "Measurements behind
// code choices"; benchmarks/bench_batch.py's Dask and Ray paths load their model this way).
// Such a model leaves its threads to the OS scheduler.
bool takes_a_share_of_the_machine(const BackendOptions& options) {
  const long cores = static_cast<long>(std::thread::hardware_concurrency());
  const long wanted = static_cast<long>(options.threads) * std::max(options.concurrent_predictions, 1);
  return options.threads > 0 && cores > 0 && wanted < cores;
}

ov::Core& core() {
  static ov::Core instance;
  return instance;
}

std::vector<std::pair<const ir::ConstValue*, std::string>> OpenVinoBackend::decoded_constants(
    const Region& region) const {
  // The constants RegionBuilder::value_of decodes: forms OpenVINO has no kernels for, and
  // convolution weights.
  std::vector<std::pair<const ir::ConstValue*, std::string>> out;
  std::set<const ir::ConstValue*> seen;
  for (const ir::Operation* op : region.ops)
    for (const auto& [param, bindings] : op->inputs)
      for (const ir::Binding& binding : bindings) {
        const ir::ConstValue* constant = region.values.constant(binding);
        if (!constant || !constant->packed || seen.count(constant)) continue;
        const bool convolution = op->type == "conv" && param == "weight";
        if (!reaches_plugin_decoded(*constant->packed, convolution)) continue;
        seen.insert(constant);
        out.emplace_back(constant, std::string("decoded to ") + dtype_name(constant->packed->dtype) + " for " + name() +
                                       (convolution ? " (its convolutions take no compressed weights)"
                                                    : " (it has no kernel for this form)") +
                                       " when the region is compiled, not when it is imported from the region "
                                       "cache; the copy lives in an unnamed file on a disk where one can be made, "
                                       "its pages out of memory once compiled");
      }
  return out;
}

// Where a region's decoded weights may be kept in files (RegionBuilder::decoded_for_plugin): the
// cache folder, else the temporary directory ($TMPDIR or /tmp).
std::string spill_dir(const BackendOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  std::error_code error;
  const std::filesystem::path temporary = std::filesystem::temp_directory_path(error);
  return error ? std::string() : temporary.string();
}

std::unique_ptr<ops::Kernel> OpenVinoBackend::compile(const Region& region) const {
  bool fp16_program = false;
  for (const ir::Operation* op : region.ops)
    for (const ir::NamedValue& out : op->outputs) fp16_program = fp16_program || out.type.dtype == DType::Float16;
  // One stream runs one infer request at a time: requests from predictions running together
  // queue on it. With concurrent_predictions > 1 the plugin makes that many streams and splits
  // the threads between them, so side-by-side predictions run without waiting and without
  // synchronising threads inside each op (include/coremlrt/model.h, LoadOptions).
  const bool throughput = options_.concurrent_predictions > 1;
  const int streams = throughput ? options_.concurrent_predictions : 1;
  try {
    ov::AnyMap config = {
        ov::hint::performance_mode(throughput ? ov::hint::PerformanceMode::THROUGHPUT
                                              : ov::hint::PerformanceMode::LATENCY),
        // docs/design/architecture.md, law 6: fp32 unless the caller opted in to the low-precision mode, and then
        // bf16 only for fp16 programs.
        ov::hint::inference_precision(options_.low_precision && fp16_program ? ov::element::bf16 : ov::element::f32),
        // Compressed weights multiply float activations, as Core ML's weight-only compression
        // defines (docs/design/compressed-weights.md). On CPUs with int8 dot products (AVX-512
        // VNNI, AMX) the plugin would otherwise quantize the activations of such matmuls to int8
        // in groups: errors of several percent, in either precision mode.
        ov::hint::dynamic_quantization_group_size(0),
    };
    if (options_.threads > 0) config.emplace(ov::inference_num_threads(options_.threads));
    if (throughput) config.emplace(ov::num_streams(options_.concurrent_predictions));
    if (takes_a_share_of_the_machine(options_)) config.emplace(ov::hint::enable_cpu_pinning(false));
    // Our own cache, not ov::cache_dir: a hit skips building the region (region_cache.h).
    const bool shared_constants = shares_large_constants(region);
    const std::string cached_at = options_.cache_dir.empty() || shared_constants
                                      ? std::string()
                                      : region_cache_path(core(), options_.cache_dir, region, config, options_.low_precision);
    if (!cached_at.empty())
      if (std::optional<CachedRegion> cached = import_cached_region(core(), cached_at, region, config)) {
        release_constant_pages(region);
        release_imported_pages(*cached);
        return make_region_kernel(std::move(cached->compiled), region, {cached->mapping}, streams, cached->guarded,
                                  std::move(cached->blob));
      }
    std::vector<Tensor> kept;
    RegionBuilder builder(region, options_.low_precision, spill_dir(options_), !shared_constants);
    std::shared_ptr<ov::Model> model = builder.build(kept);
    ov::CompiledModel compiled = core().compile_model(model, "CPU", config);
    if (!cached_at.empty()) store_region(compiled, cached_at);
    // The plugin holds its own copies of the weights it repacked; the weight file's pages it read
    // them from need not stay in this process's memory, as after an imported region (a constant
    // the compiled model still reads maps its pages again, from the file, when it reads them).
    if (!shared_constants) release_constant_pages(region);
    for (const Tensor& decoded : builder.spilled()) format::BlobFile::release_pages(decoded.data, decoded.nbytes());
    return make_region_kernel(std::move(compiled), region, std::move(kept), streams, builder.guarded(), {});
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("OpenVINO: ", e.what());
  }
}

}  // namespace

std::shared_ptr<const Backend> make_backend(const BackendOptions& options) {
  return std::make_shared<OpenVinoBackend>(options);
}

}  // namespace coremlrt::backends::openvino
