#pragma once
// Compiling a model to the folder form apps ship (.mlmodelc): model.mil (the program as
// text), weights/, metadata.json. Model::load reads such folders, whoever wrote them, as far
// as model.mil, the weights and metadata.json describe the model (docs/design/mil-text.md).
#include <string>

namespace coremlrt {

// Writes `destination` (must end in .mlmodelc and not exist) from the .mlpackage or .mlmodel
// at `source`. Throws Error; a failure leaves nothing at `destination`.
void compile_model(const std::string& source, const std::string& destination);

}  // namespace coremlrt
