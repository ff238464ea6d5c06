// imputer (Model field 601): every input element equal to the replaced value (NaN when none is
// given, or the given NaN: any NaN) becomes the imputed value for its place, computed by the
// `imputer` op (src/ops/feature_engineering.cc). Numbers only: a string imputer returns a
// string, and this engine returns strings only as a classifier's label (string inputs reach it
// as codes, format/classic/text_feature_readers.cc); dictionary imputation returns a dictionary,
// which a model on its own does not return either. Both are refused.
#include <limits>

#include "classic_feature.pb.h"
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

namespace spec = CoreML::Specification;

ir::Program read_imputer(const std::string& serialized, const FunctionDescription& description) {
  spec::Imputer imputer;
  COREMLRT_CHECK(imputer.ParseFromString(serialized), "imputer: the message does not parse");
  PredictorProgram program(description, "imputer");
  std::vector<double> imputed;
  switch (imputer.ImputedValue_case()) {
    case spec::Imputer::kImputedDoubleValue: imputed = {imputer.imputeddoublevalue()}; break;
    case spec::Imputer::kImputedInt64Value: imputed = {static_cast<double>(imputer.imputedint64value())}; break;
    case spec::Imputer::kImputedDoubleArray:
      imputed.assign(imputer.imputeddoublearray().vector().begin(), imputer.imputeddoublearray().vector().end());
      break;
    case spec::Imputer::kImputedInt64Array:
      for (int64_t v : imputer.imputedint64array().vector()) imputed.push_back(static_cast<double>(v));
      break;
    case spec::Imputer::kImputedStringValue:
      fail("imputer: imputing a string gives a string output, and this build returns strings only as a "
           "classifier's label");
    case spec::Imputer::kImputedStringDictionary:
    case spec::Imputer::kImputedInt64Dictionary:
      fail("imputer: imputing dictionaries is not supported by this build (it returns dictionaries only as a "
           "classifier's class probabilities)");
    default: fail("imputer: the model gives no imputed value");
  }
  double missing = std::numeric_limits<double>::quiet_NaN();
  switch (imputer.ReplaceValue_case()) {
    case spec::Imputer::kReplaceDoubleValue: missing = imputer.replacedoublevalue(); break;
    case spec::Imputer::kReplaceInt64Value: missing = static_cast<double>(imputer.replaceint64value()); break;
    case spec::Imputer::kReplaceStringValue:
      fail("imputer: replacing a string value gives a string output, and this build returns strings only as a "
           "classifier's label");
    default: break;
  }
  int64_t count = program.feature_count();
  const auto n = static_cast<int64_t>(imputed.size());
  COREMLRT_CHECK(n > 0, "imputer: the imputed array is empty");
  if (n > 1) {
    COREMLRT_CHECK(count < 0 || count == n, "imputer: ", n, " imputed values for inputs of ", count, " values");
    count = n;
  }
  COREMLRT_CHECK(count > 0, "imputer: the input's size is open and no imputed array fixes it");
  std::string value = program.transformer_output_value();
  auto missing_value = f64_tensor({missing}, {});
  program.add_model_op("imputer", {{"imputed", f64_tensor(std::move(imputed), {n})}, {"missing", missing_value}},
                       program.transformer_output_type(count), value);
  program.finish_transformer(value);
  return program.take();
}

}  // namespace coremlrt::format::classic
