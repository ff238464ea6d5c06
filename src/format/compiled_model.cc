#include "format/compiled_model.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "Model.pb.h"
#include "coremlrt/compile.h"
#include "coremlrt/error.h"
#include "coremlrt/limits.h"
#include "format/compiled_metadata.h"
#include "format/memory_model.h"
#include "format/mil_text.h"
#include "format/model_kinds.h"
#include "format/pipeline_message.h"
#include "format/value_reader.h"

namespace coremlrt::format {

namespace fs = std::filesystem;
namespace spec = CoreML::Specification;
namespace mil = CoreML::Specification::MILSpec;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  COREMLRT_CHECK(in.good(), "cannot read '", path.string(), "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  COREMLRT_CHECK(out.good(), "cannot write '", path.string(), "'");
}

// The blob files the program refers to ("@model_path/weights/weight.bin"), from every value.
void collect_blob_files(const mil::Value& value, std::set<std::string>& out) {
  if (value.has_blobfilevalue()) out.insert(value.blobfilevalue().filename());
}

void collect_blob_files(const mil::Block& block, std::set<std::string>& out) {
  for (const auto& op : block.operations()) {
    for (const auto& [key, value] : op.attributes()) collect_blob_files(value, out);
    for (const auto& [param, argument] : op.inputs())
      for (const auto& binding : argument.arguments())
        if (binding.has_value()) collect_blob_files(binding.value(), out);
    for (const auto& nested : op.blocks()) collect_blob_files(nested, out);
  }
}

// "Ios18.add" -> count over every block, as Core ML's metadata.json lists an ML program's ops.
void count_ops(const mil::Block& block, const std::string& opset, std::map<std::string, int>& out) {
  for (const auto& op : block.operations()) {
    ++out[opset + "." + op.type()];
    for (const auto& nested : op.blocks()) count_ops(nested, opset, out);
  }
}

std::string histogram_opset(const std::string& opset) {
  int version = ir::ios_version_of_opset(opset);
  if (version == 0) return opset;
  return "Ios" + std::to_string(version == 19 ? 26 : version);
}

// Copies `relative` (inside the model) from the source model's folder into the compiled one.
void copy_blob_file(const std::string& file_name, const fs::path& from_dir, const fs::path& to_dir) {
  static const std::string kPrefix = "@model_path/";
  COREMLRT_CHECK(file_name.rfind(kPrefix, 0) == 0, "blob file name '", file_name, "' does not start with @model_path/");
  fs::path relative = fs::path(file_name.substr(kPrefix.size())).lexically_normal();
  COREMLRT_CHECK(!relative.is_absolute() && relative.string().rfind("..", 0) != 0, "blob file '", file_name,
                 "' points outside the model");
  fs::path target = to_dir / relative;
  fs::create_directories(target.parent_path());
  std::error_code ec;
  fs::copy_file(from_dir / relative, target, fs::copy_options::overwrite_existing, ec);
  COREMLRT_CHECK(!ec, "cannot copy weight file '", (from_dir / relative).string(), "' to '", target.string(),
                 "': ", ec.message());
}

// The same for a weight file given in memory.
void write_memory_blob(const std::string& file_name, const MemoryModel& model, const fs::path& to_dir) {
  static const std::string kPrefix = "@model_path/";
  COREMLRT_CHECK(file_name.rfind(kPrefix, 0) == 0, "blob file name '", file_name, "' does not start with @model_path/");
  fs::path relative = fs::path(file_name.substr(kPrefix.size())).lexically_normal();
  auto blob = model.blobs.find(relative.string());
  COREMLRT_CHECK(blob != model.blobs.end(), "the blob mapping has no '", relative.string(), "'");
  fs::create_directories((to_dir / relative).parent_path());
  write_bytes(to_dir / relative, std::string(reinterpret_cast<const char*>(blob->second->bytes()), blob->second->size()));
}

// The blob files an ML program references, and its ops by type (for the metadata), or those of
// every ML program stage of a pipeline, nested ones included.
void collect_program_blobs(const spec::Model& model, std::set<std::string>& blobs, std::map<std::string, int>& histogram,
                           int depth) {
  if (model.Type_case() == spec::Model::kMlProgram) {
    for (const auto& [name, function] : model.mlprogram().functions()) {
      auto block = function.block_specializations().find(function.opset());
      if (block == function.block_specializations().end()) continue;
      collect_blob_files(block->second, blobs);
      if (depth == 0) count_ops(block->second, histogram_opset(function.opset()), histogram);
    }
    return;
  }
  spec::Pipeline pipeline;
  if (depth >= kMaxBlockNesting || !parse_pipeline(model, pipeline)) return;  // read_model checked it
  for (const std::string& bytes : pipeline.models()) {
    spec::Model stage;
    if (stage.ParseFromString(bytes)) collect_program_blobs(stage, blobs, histogram, depth + 1);
  }
}

void assemble(const ModelFiles& files, const std::string& bytes, const fs::path& folder) {
  spec::Model model;
  COREMLRT_CHECK(model.ParseFromString(bytes), "model file '", files.model_file,
                 "' is not a valid Core ML model (the protobuf does not parse)");
  LoadedModel loaded = read_model(files);  // validates and gives the description
  fs::create_directories(folder);
  write_bytes(folder / kCompiledSourceFile, bytes);
  std::map<std::string, int> histogram;
  if (model.Type_case() == spec::Model::kMlProgram) {
    ValueReader values(files.model_dir);
    write_bytes(folder / kCompiledProgramFile, print_mil_text(model.mlprogram(), values));
  }
  // The weight files of the program, or of a pipeline's ML program stages (each its own
  // weights/<i>-weight.bin), go with the source model.
  std::set<std::string> blobs;
  collect_program_blobs(model, blobs, histogram, 0);
  for (const auto& blob : blobs) {
    if (files.in_memory) write_memory_blob(blob, *find_memory_model(files.model_file), folder);
    else copy_blob_file(blob, files.model_dir, folder);
  }
  write_bytes(folder / kCompiledMetadataFile, write_compiled_metadata(loaded.description, histogram));
}

}  // namespace

void write_compiled_model(const std::string& source, const std::string& destination) {
  fs::path target = fs::path(destination).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  COREMLRT_CHECK(target.extension() == ".mlmodelc", "compiled model path '", destination,
                 "' must end in .mlmodelc");
  COREMLRT_CHECK(!fs::exists(target), "compiled model path '", destination, "' already exists");
  ModelFiles files = locate_model(source);
  COREMLRT_CHECK(!files.compiled, "'", source, "' is already a compiled model");
  std::shared_ptr<const MemoryModel> memory = files.in_memory ? find_memory_model(files.model_file) : nullptr;
  const std::string bytes = memory ? memory->spec : read_bytes(files.model_file);
  fs::path partial = target;
  partial += ".partial-" + std::to_string(::getpid());
  fs::remove_all(partial);
  try {
    assemble(files, bytes, partial);
    fs::rename(partial, target);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(partial);
    fail("cannot write compiled model '", destination, "': ", e.what());
  } catch (...) {
    fs::remove_all(partial);
    throw;
  }
}

ModelFiles locate_compiled_model(const std::string& folder) {
  fs::path dir(folder);
  ModelFiles files;
  files.model_dir = dir.string();
  files.compiled = true;
  if (fs::is_regular_file(dir / kCompiledProgramFile)) {
    files.model_file = (dir / kCompiledProgramFile).string();
    return files;
  }
  if (fs::is_regular_file(dir / kCompiledSourceFile)) {
    files.model_file = (dir / kCompiledSourceFile).string();
    return files;
  }
  fail("compiled model '", folder, "' has no ", kCompiledProgramFile,
       ": only ML programs compiled to text can be read (neuralNetwork and other model types are stored by "
       "Apple's compiler in binary files this build cannot read; load the .mlmodel or .mlpackage instead)");
}

LoadedModel read_compiled_model(const ModelFiles& files) {
  if (fs::path(files.model_file).filename() == kCompiledSourceFile) {
    ModelFiles source = files;
    source.compiled = false;
    LoadedModel out = read_model(source);
    out.files = files;
    return out;
  }
  const fs::path dir(files.model_dir);
  const fs::path metadata = dir / kCompiledMetadataFile;
  COREMLRT_CHECK(fs::is_regular_file(metadata), "compiled model '", files.model_dir, "' has no ",
                 kCompiledMetadataFile, " (it describes the inputs and outputs)");
  LoadedModel out;
  out.files = files;
  out.description = read_compiled_metadata(read_bytes(metadata), metadata.string());
  COREMLRT_CHECK(is_model_family(out.description.model_type, ModelFamily::MlProgram), "compiled model '",
                 files.model_dir, "': metadata.json says model type '", out.description.model_type, "' but the folder holds ",
                 kCompiledProgramFile, " (an ML program)");
  COREMLRT_CHECK(out.description.specification_version <= kMaxSpecificationVersion, "compiled model '",
                 files.model_dir, "' has specification version ", out.description.specification_version,
                 "; this build reads up to ", kMaxSpecificationVersion);
  ValueReader values(files.model_dir);
  out.program = read_mil_text(read_bytes(files.model_file), files.model_file, values);
  out.weight_bytes = values.weight_bytes();
  // Every function the description names must be in the program, and a single-function
  // description ("main") must match the program's one function.
  for (const auto& f : out.description.functions)
    COREMLRT_CHECK(out.program.functions.count(f.name), "compiled model '", files.model_dir, "': ",
                   kCompiledMetadataFile, " describes function '", f.name, "', which ", kCompiledProgramFile,
                   " does not define");
  return out;
}

}  // namespace coremlrt::format

namespace coremlrt {

void compile_model(const std::string& source, const std::string& destination) try {
  format::write_compiled_model(source, destination);
} catch (...) {
  rethrow_as(ErrorKind::BadModel);  // what it reads is a model: coremlrt/error.h
}

}  // namespace coremlrt
