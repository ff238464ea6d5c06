// identity (Model field 900): each output is the input of the same name, passed through by an
// `identity` op (src/ops/misc.cc).
#include "coremlrt/error.h"
#include "format/classic/predictor.h"

namespace coremlrt::format::classic {

ir::Program read_identity(const FunctionDescription& description) {
  PredictorProgram program(description, "identity");
  for (const FeatureDescription& output : description.outputs) program.pass_through(output.name);
  return program.take();
}

}  // namespace coremlrt::format::classic
