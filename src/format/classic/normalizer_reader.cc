// normalizer (Model field 607): x / ||x|| for the L1, L2 or max (largest magnitude) norm,
// computed by the `normalizer` op (src/ops/feature_engineering.cc); a zero vector stays zero.
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

ir::Program read_normalizer(const std::string& serialized, const FunctionDescription& description) {
  spec::Normalizer normalizer;
  COREMLRT_CHECK(normalizer.ParseFromString(serialized), "normalizer: the message does not parse");
  PredictorProgram program(description, "normalizer");
  const char* norm = nullptr;
  switch (normalizer.normtype()) {
    case spec::Normalizer::LMax: norm = "lmax"; break;
    case spec::Normalizer::L1: norm = "l1"; break;
    case spec::Normalizer::L2: norm = "l2"; break;
    default: fail("normalizer: unknown normType ", static_cast<int>(normalizer.normtype()));
  }
  const int64_t count = program.feature_count();
  COREMLRT_CHECK(count > 0, "normalizer: the input's size must be fixed");
  std::string value = program.transformer_output_value();
  program.add_model_op("normalizer", {{"norm", string_scalar(norm)}}, program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
