#pragma once
// model.mil: the text form of an ML program that a compiled model folder (.mlmodelc) holds.
// The grammar, written from the texts coremltools' own tests check, is in docs/design/mil-text.md.
// The printer writes a program read from protobuf; the reader turns such a text (ours or one
// written by Apple's compiler) into the same ir::Program that spec_reader.cc makes from the
// protobuf, so that both load paths run the same plan.
#include <optional>
#include <string>

#include "MIL.pb.h"
#include "format/value_reader.h"
#include "ir/program.h"

namespace coremlrt::format {

// The text for `program`. Blob constants keep their file names and offsets (the weight files
// are copied unchanged beside model.mil); immediate values are printed exactly (floats in
// hexadecimal). `values` decodes immediates. Throws Error naming what cannot be written
// (a value name that is not a MIL identifier, say).
std::string print_mil_text(const CoreML::Specification::MILSpec::Program& program, ValueReader& values);

// Parses model.mil text. `file_name` names the file in errors, which also give the line;
// `values` resolves BLOBFILE references against the folder holding model.mil.
ir::Program read_mil_text(const std::string& text, const std::string& file_name, ValueReader& values);

// MIL's element type names ("fp16", "int32", "uint1", "string", ...), both ways.
const char* mil_text_dtype_name(DType dtype);
std::optional<DType> dtype_from_mil_text(const std::string& name);

}  // namespace coremlrt::format
