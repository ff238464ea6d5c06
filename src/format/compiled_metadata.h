#pragma once
// metadata.json of a compiled model folder (.mlmodelc): the model's description (input,
// output and state schemas per function, metadata, specification version) as JSON. The keys
// written and read are listed in docs/design/mil-text.md ("metadata.json").
#include <map>
#include <string>

#include "coremlrt/description.h"

namespace coremlrt::format {

// The JSON text for `description`; `op_histogram` ("ios18.add" -> count) may be empty.
std::string write_compiled_metadata(const ModelDescription& description,
                                    const std::map<std::string, int>& op_histogram);

// Parses metadata.json (`path` names it in errors). Throws Error naming the key that is
// missing or malformed.
ModelDescription read_compiled_metadata(const std::string& text, const std::string& path);

}  // namespace coremlrt::format
