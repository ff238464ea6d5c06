#pragma once
// Compiled model folders (.mlmodelc), the form apps ship. An ML program's folder holds
//   model.mil          the program as text (mil_text.h; grammar in docs/design/mil-text.md)
//   weights/...        the weight files, unchanged (BLOBFILE offsets stay valid)
//   metadata.json      the description: input/output/state schemas, metadata (compiled_metadata.h)
// Apple's compiler adds binary files (coremldata.bin, analytics/) that this build does not
// read. Folders written here also keep the source protobuf as `coremlrt-source.mlmodel`: the
// only way to load a model that is not an ML program (neuralNetwork), whose compiled form
// Apple keeps in binary files; ML programs always load from model.mil.
#include <string>

#include "format/spec_reader.h"

namespace coremlrt::format {

inline constexpr const char* kCompiledProgramFile = "model.mil";
inline constexpr const char* kCompiledMetadataFile = "metadata.json";
inline constexpr const char* kCompiledSourceFile = "coremlrt-source.mlmodel";

// Writes the compiled folder `destination` (which must end in .mlmodelc and must not exist)
// for the .mlpackage or .mlmodel at `source`. The folder is assembled beside `destination`
// and renamed into place, so a failure leaves nothing behind.
void write_compiled_model(const std::string& source, const std::string& destination);

// The files of a compiled folder: model.mil when present, else the source copy.
ModelFiles locate_compiled_model(const std::string& folder);

// Reads a compiled folder located by locate_compiled_model().
LoadedModel read_compiled_model(const ModelFiles& files);

}  // namespace coremlrt::format
