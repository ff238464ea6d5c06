#pragma once
// Builds a region's graph for OpenVINO (docs/design/architecture.md, "Backends", 6): parameters for
// its inputs, constants (views of the plan's constants, not copies) for values known at load, and
// each op's lowering in order (lowering.h), each checked against the types the program declares.
//
// constants, not copies) for values known at load, and each op's lowering in order.
//
// fp16 values are computed in fp32 (the region's inputs, constants and outputs converted at its
// edges) unless `keep_fp16`: then OpenVINO sees the fp16 program as it is and its bf16 inference
// precision applies (the low-precision mode). Converting the edges ourselves matters for speed:
// given fp16 constants, the CPU plugin keeps them as fp16 and converts them at every inference.
#include <openvino/core/model.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/openvino/lowering.h"

namespace coremlrt::backends::openvino {

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

  std::shared_ptr<ov::Model> build(std::vector<Tensor>& kept_constants);

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

  Value value_of(const ir::Binding& binding);

  // The values of a packed constant that the plugin reads dense. The plugin keeps the constant
  // as long as the compiled model but reads it only while compiling (it repacks the weights into
  // its own layout), so where an unnamed file can be made (BlobFile::spill: beside the cache, or
  // in the temporary directory, on a disk) the values live there, mapped as a weight file is,
  // and their pages leave this process once the region is compiled (spilled()); a later read
  // maps them again. Otherwise engine memory holds them (docs/design/compressed-weights.md,
  // docs/reports/performance.md).
  Tensor decoded_for_plugin(const ir::PackedTensor& packed);

  // Whether an op of the region whose lowering decodes its packed inputs (a convolution) reads
  // `constant`.
  bool read_decoded(const ir::ConstValue& constant) const;

  // A constant stored dense: a view of it, or its fp16 values widened to the fp32 the region computes in.
  Value dense_constant(const Tensor& t, const std::string& name);

  // An fp16 constant of a region computed in fp32 as a view in fp16 (shared by its readers);
  // value_of() for every other value.
  Value stored(const ir::Binding& binding);

  void lower(const ir::Operation& op);

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

}  // namespace coremlrt::backends::openvino
