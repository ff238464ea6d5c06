#pragma once
// MIL types and values from the protobuf into ir:: types and constants.
#include <map>
#include <memory>
#include <string>

#include "MIL.pb.h"
#include "format/blob_file.h"
#include "ir/program.h"

namespace coremlrt::format {

ir::ValueType read_value_type(const CoreML::Specification::MILSpec::ValueType& type);
// MIL DataType -> engine dtype; throws for types the engine has no representation for.
DType mil_dtype(CoreML::Specification::MILSpec::DataType type);

class ValueReader {
 public:
  // `model_dir` is what "@model_path" in blob file names stands for.
  explicit ValueReader(std::string model_dir) : model_dir_(std::move(model_dir)) {}

  // `where` names the value's owner for error messages.
  ir::ConstValue read(const CoreML::Specification::MILSpec::Value& value, const std::string& where);
  // The blob at `offset` of `file_name` ("@model_path/..."), for a value of static tensor `type`
  // (model.mil's BLOBFILE values).
  ir::ConstValue read_blob(const ir::ValueType& type, const std::string& file_name, uint64_t offset,
                           const std::string& where);
  // The tensor of static `type` whose bytes lie raw at `offset` of `file_name` ("@model_path/...":
  // model.mil's RAWDATA values, coremlrt's form, docs/design/mil-text.md).
  ir::ConstValue read_raw(const ir::ValueType& type, const std::string& file_name, uint64_t offset,
                          const std::string& where);
  size_t weight_bytes() const;
  // Resolve "@model_path/..." names in these weight files (a model given in memory) instead of
  // on disk; keys are normalized relative paths.
  void use_memory_blobs(const std::map<std::string, std::shared_ptr<BlobFile>>& blobs) { memory_blobs_ = &blobs; }

 private:
  const BlobFile& blob_file(const std::string& file_name, const std::string& where,
                            BlobFile::Layout layout = BlobFile::Layout::Storage);
  std::string model_dir_;
  std::map<std::string, std::shared_ptr<BlobFile>> files_;
  const std::map<std::string, std::shared_ptr<BlobFile>>* memory_blobs_ = nullptr;
};

}  // namespace coremlrt::format
