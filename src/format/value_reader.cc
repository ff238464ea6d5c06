#include "format/value_reader.h"

#include <cstring>
#include <filesystem>

#include "coremlrt/error.h"

namespace coremlrt::format {

namespace mil = CoreML::Specification::MILSpec;
namespace fs = std::filesystem;

DType mil_dtype(mil::DataType type) {
  switch (type) {
    case mil::BOOL: return DType::Bool;
    case mil::STRING: return DType::String;
    case mil::FLOAT16: return DType::Float16;
    case mil::FLOAT32: return DType::Float32;
    case mil::FLOAT64: return DType::Float64;
    case mil::INT8: return DType::Int8;
    case mil::INT16: return DType::Int16;
    case mil::INT32: return DType::Int32;
    case mil::INT64: return DType::Int64;
    case mil::INT4: return DType::Int4;
    case mil::UINT8: return DType::UInt8;
    case mil::UINT16: return DType::UInt16;
    case mil::UINT32: return DType::UInt32;
    case mil::UINT64: return DType::UInt64;
    case mil::UINT4: return DType::UInt4;
    case mil::UINT2: return DType::UInt2;
    case mil::UINT1: return DType::UInt1;
    case mil::UINT6: return DType::UInt6;
    case mil::UINT3: return DType::UInt3;
    case mil::BFLOAT16: return DType::BFloat16;
    case mil::FLOAT8E4M3FN: return DType::Float8E4M3FN;
    case mil::FLOAT8E5M2: return DType::Float8E5M2;
    default:
      fail("MIL data type ", mil::DataType_Name(type), " (", static_cast<int>(type),
           ") is not supported by this build");
  }
}

ir::ValueType read_value_type(const mil::ValueType& type) {
  ir::ValueType out;
  switch (type.type_case()) {
    case mil::ValueType::kTensorType: {
      const mil::TensorType& tensor = type.tensortype();
      out.kind = ir::TypeKind::Tensor;
      out.dtype = mil_dtype(tensor.datatype());
      out.rank = tensor.rank();
      COREMLRT_CHECK(out.rank < 0 || out.rank == tensor.dimensions_size(), "tensor type declares rank ",
                     out.rank, " but lists ", tensor.dimensions_size(), " dimensions");
      for (const auto& dim : tensor.dimensions()) {
        if (dim.has_constant()) {
          out.dims.push_back(static_cast<int64_t>(dim.constant().size()));
        } else if (dim.unknown().variadic()) {
          // A variadic dimension stands for any number of dimensions (coremltools writes the
          // unknown-rank output of `fill` with a dynamic shape this way): the rank is unknown.
          out.rank = -1;
          out.dims.clear();
          break;
        } else {
          out.dims.push_back(-1);
        }
      }
      break;
    }
    case mil::ValueType::kListType:
      out.kind = ir::TypeKind::List;
      out.element = std::make_shared<ir::ValueType>(read_value_type(type.listtype().type()));
      break;
    case mil::ValueType::kTupleType:
      out.kind = ir::TypeKind::Tuple;
      for (const auto& member : type.tupletype().types()) out.members.push_back(read_value_type(member));
      break;
    case mil::ValueType::kDictionaryType:
      out.kind = ir::TypeKind::Dictionary;
      break;
    case mil::ValueType::kStateType:
      out.kind = ir::TypeKind::State;
      out.element = std::make_shared<ir::ValueType>(read_value_type(type.statetype().wrappedtype()));
      break;
    default:
      fail("value has no type");
  }
  return out;
}

namespace {

template <class Src, class Dst>
void copy_widened(const Src& values, Dst* out) {
  int64_t i = 0;
  for (auto v : values) out[i++] = static_cast<Dst>(v);
}

ir::ConstValue read_tensor(const mil::TensorValue& value, const ir::ValueType& type, const std::string& where) {
  ir::ConstValue out;
  out.type = type;
  COREMLRT_CHECK(type.is_static(), where, ": constant has non-static type ", type.str());
  const Shape shape(type.dims.begin(), type.dims.end());
  const int64_t count = shape_numel(shape);
  if (type.dtype == DType::String) {
    COREMLRT_CHECK(value.has_strings(), where, ": string constant without string data");
    out.strings.assign(value.strings().values().begin(), value.strings().values().end());
    COREMLRT_CHECK(static_cast<int64_t>(out.strings.size()) == count, where, ": ", out.strings.size(),
                   " strings for shape ", shape_str(shape));
    out.tensor = Tensor::empty(DType::String, shape);
    return out;
  }
  Tensor t = Tensor::empty(type.dtype, shape);
  auto check_count = [&](int64_t have) {
    COREMLRT_CHECK(have == count, where, ": constant of type ", type.str(), " holds ", have,
                   " values; expected ", count);
  };
  switch (value.value_case()) {
    case mil::TensorValue::kFloats: {
      check_count(value.floats().values_size());
      const auto& v = value.floats().values();
      switch (type.dtype) {
        case DType::Float32: copy_widened(v, t.ptr<float>()); break;
        case DType::Float16: copy_widened(v, t.ptr<half>()); break;
        case DType::Float64: copy_widened(v, t.ptr<double>()); break;
        default: fail(where, ": float data for a ", dtype_name(type.dtype), " constant");
      }
      break;
    }
    case mil::TensorValue::kDoubles: {
      check_count(value.doubles().values_size());
      const auto& v = value.doubles().values();
      switch (type.dtype) {
        case DType::Float64: copy_widened(v, t.ptr<double>()); break;
        case DType::Float32: copy_widened(v, t.ptr<float>()); break;
        default: fail(where, ": double data for a ", dtype_name(type.dtype), " constant");
      }
      break;
    }
    case mil::TensorValue::kInts: {
      check_count(value.ints().values_size());
      const auto& v = value.ints().values();
      switch (type.dtype) {
        case DType::Int32: copy_widened(v, t.ptr<int32_t>()); break;
        case DType::Int16: copy_widened(v, t.ptr<int16_t>()); break;
        case DType::UInt16: copy_widened(v, t.ptr<uint16_t>()); break;
        case DType::Int8: copy_widened(v, t.ptr<int8_t>()); break;
        case DType::UInt8: copy_widened(v, t.ptr<uint8_t>()); break;
        case DType::UInt32: copy_widened(v, t.ptr<uint32_t>()); break;
        default: fail(where, ": int data for a ", dtype_name(type.dtype), " constant");
      }
      break;
    }
    case mil::TensorValue::kLongInts: {
      check_count(value.longints().values_size());
      const auto& v = value.longints().values();
      switch (type.dtype) {
        case DType::Int64: copy_widened(v, t.ptr<int64_t>()); break;
        case DType::UInt64: copy_widened(v, t.ptr<uint64_t>()); break;
        case DType::Int32: copy_widened(v, t.ptr<int32_t>()); break;
        default: fail(where, ": int64 data for a ", dtype_name(type.dtype), " constant");
      }
      break;
    }
    case mil::TensorValue::kBools: {
      check_count(value.bools().values_size());
      COREMLRT_CHECK(type.dtype == DType::Bool, where, ": bool data for a ", dtype_name(type.dtype), " constant");
      copy_widened(value.bools().values(), t.ptr<uint8_t>());
      break;
    }
    case mil::TensorValue::kBytes: {
      const std::string& bytes = value.bytes().values();
      int bits = sub_byte_bits(type.dtype);
      if (bits) {
        COREMLRT_CHECK(static_cast<int64_t>(bytes.size()) * 8 >= count * bits, where, ": ", bytes.size(),
                       " packed bytes are too few for ", count, " ", dtype_name(type.dtype), " values");
        unpack_sub_byte(reinterpret_cast<const uint8_t*>(bytes.data()), count, bits, type.dtype == DType::Int4,
                        t.ptr<uint8_t>());
      } else {
        COREMLRT_CHECK(bytes.size() == t.nbytes(), where, ": ", bytes.size(), " raw bytes for ", type.str(),
                       "; expected ", t.nbytes());
        if (!bytes.empty()) std::memcpy(t.data, bytes.data(), bytes.size());
      }
      break;
    }
    case mil::TensorValue::VALUE_NOT_SET:
      check_count(0);
      break;
    default:
      fail(where, ": constant data of an unexpected kind for ", type.str());
  }
  out.tensor = std::move(t);
  return out;
}

}  // namespace

const BlobFile& ValueReader::blob_file(const std::string& file_name, const std::string& where,
                                       BlobFile::Layout layout) {
  static const std::string kPrefix = "@model_path/";
  COREMLRT_CHECK(file_name.rfind(kPrefix, 0) == 0, where, ": blob file name '", file_name,
                 "' does not start with @model_path/");
  fs::path relative = fs::path(file_name.substr(kPrefix.size())).lexically_normal();
  COREMLRT_CHECK(!relative.is_absolute() && relative.string().rfind("..", 0) != 0, where, ": blob file '",
                 file_name, "' points outside the model");
  if (memory_blobs_) {
    COREMLRT_CHECK(layout == BlobFile::Layout::Storage, where, ": a model given in memory has no raw data file ('",
                   file_name, "')");
    auto blob = memory_blobs_->find(relative.string());
    COREMLRT_CHECK(blob != memory_blobs_->end(), where, ": the blob mapping has no '", relative.string(),
                   "' (the model refers to '", file_name, "')");
    files_.emplace(relative.string(), blob->second);
    return *blob->second;
  }
  std::string path = (fs::path(model_dir_) / relative).string();
  // One file is read in one layout: the key keeps a raw reading of a blob file apart.
  const std::string key = layout == BlobFile::Layout::Raw ? path + "\n(raw)" : path;
  auto it = files_.find(key);
  if (it == files_.end()) {
    COREMLRT_CHECK(fs::is_regular_file(path), where, ": weight file '", path, "' does not exist");
    it = files_.emplace(key, BlobFile::open_shared(path, layout)).first;
  }
  return *it->second;
}

ir::ConstValue ValueReader::read_blob(const ir::ValueType& type, const std::string& file_name, uint64_t offset,
                                     const std::string& where) {
  COREMLRT_CHECK(type.kind == ir::TypeKind::Tensor && type.is_static(), where,
                 ": blob constant must have a static tensor type, not ", type.str());
  const BlobFile& file = blob_file(file_name, where);
  ir::ConstValue out;
  out.type = type;
  const Shape shape(type.dims.begin(), type.dims.end());
  const int bits = sub_byte_bits(type.dtype);
  if (bits == 0) {
    out.tensor = file.read(offset, type.dtype, shape);
    return out;
  }
  // Sub-byte data stays bit-packed in the mapping (src/ir/packed.h); readers that need one
  // value per byte unpack it (src/runtime/plan.cc).
  auto packed = std::make_shared<ir::PackedTensor>();
  packed->dtype = type.dtype;
  packed->shape = shape;
  packed->codes = {file.read_stored(offset, type.dtype, shape), type.dtype, bits, shape_numel(shape)};
  packed->groups = Shape(shape.size(), 1);
  out.tensor.dtype = type.dtype;
  out.tensor.shape = shape;
  out.packed = std::move(packed);
  return out;
}

ir::ConstValue ValueReader::read_raw(const ir::ValueType& type, const std::string& file_name, uint64_t offset,
                                    const std::string& where) {
  COREMLRT_CHECK(type.kind == ir::TypeKind::Tensor && type.is_static(), where,
                 ": raw constant must have a static tensor type, not ", type.str());
  ir::ConstValue out;
  out.type = type;
  try {
    const BlobFile& file = blob_file(file_name, where, BlobFile::Layout::Raw);
    out.tensor = file.read_raw(offset, type.dtype, Shape(type.dims.begin(), type.dims.end()));
  } catch (const Error& e) {
    fail_like(e, where, ": ", e.what());  // the file's message names the file; this names the constant
  }
  return out;
}

size_t ValueReader::weight_bytes() const {
  size_t total = 0;
  for (const auto& [path, file] : files_) total += file->size();
  return total;
}

ir::ConstValue ValueReader::read(const mil::Value& value, const std::string& where) {
  ir::ValueType type = read_value_type(value.type());
  if (value.has_blobfilevalue()) {
    COREMLRT_CHECK(type.kind == ir::TypeKind::Tensor && type.is_static(), where,
                   ": blob constant must have a static tensor type, not ", type.str());
    try {
      return read_blob(type, value.blobfilevalue().filename(), value.blobfilevalue().offset(), where);
    } catch (const Error& e) {
      fail_like(e, where, ": ", e.what());  // the blob reader names the file; this names the op
    }
  }
  COREMLRT_CHECK(value.has_immediatevalue(), where, ": value has neither immediate data nor a blob reference");
  const auto& immediate = value.immediatevalue();
  switch (immediate.value_case()) {
    case mil::Value::ImmediateValue::kTensor:
      COREMLRT_CHECK(type.kind == ir::TypeKind::Tensor, where, ": tensor data for a ", type.str(), " value");
      return read_tensor(immediate.tensor(), type, where);
    case mil::Value::ImmediateValue::kTuple:
    case mil::Value::ImmediateValue::kList: {
      ir::ConstValue out;
      out.type = type;
      const auto& items = immediate.has_tuple() ? immediate.tuple().values() : immediate.list().values();
      for (const auto& item : items) out.items.push_back(read(item, where));
      return out;
    }
    case mil::Value::ImmediateValue::kDictionary: {
      ir::ConstValue out;
      out.type = type;
      for (const auto& pair : immediate.dictionary().values()) {
        out.items.push_back(read(pair.key(), where));
        out.items.push_back(read(pair.value(), where));
      }
      return out;
    }
    default:
      fail(where, ": empty immediate value");
  }
}

}  // namespace coremlrt::format
