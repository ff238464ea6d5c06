// scaler (Model field 604): y = (x + shiftValue) * scaleValue per element, computed by the
// `scaler` op (src/ops/feature_engineering.cc). A single shift or scale value serves every
// element; no value at all means shift 0, scale 1.
#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

ir::Program read_scaler(const std::string& serialized, const FunctionDescription& description) {
  CoreML::Specification::Scaler scaler;
  COREMLRT_CHECK(scaler.ParseFromString(serialized), "scaler: the message does not parse");
  PredictorProgram program(description, "scaler");
  std::vector<double> shift(scaler.shiftvalue().begin(), scaler.shiftvalue().end());
  std::vector<double> scale(scaler.scalevalue().begin(), scaler.scalevalue().end());
  if (shift.empty()) shift = {0.0};
  if (scale.empty()) scale = {1.0};
  int64_t count = program.feature_count();
  for (const auto* values : {&shift, &scale}) {
    const auto n = static_cast<int64_t>(values->size());
    if (n == 1) continue;
    COREMLRT_CHECK(count < 0 || count == n, "scaler: ", n, " shift or scale values for inputs of ", count, " values");
    count = n;
  }
  COREMLRT_CHECK(count > 0, "scaler: the input's size is open and no per-element values fix it");
  const auto shifts = static_cast<int64_t>(shift.size()), scales = static_cast<int64_t>(scale.size());
  std::string value = program.transformer_output_value();
  program.add_model_op("scaler", {{"shift", f64_tensor(std::move(shift), {shifts})}, {"scale", f64_tensor(std::move(scale), {scales})}},
                       program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
