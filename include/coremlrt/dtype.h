#pragma once
// Element types of engine tensors. This enum is ours: the three enums of the file format
// (MIL DataType, blob BlobDataType, feature ArrayDataType) are mapped onto it by format/.
#include <cstddef>
#include <cstdint>
#include <string>

namespace coremlrt {

// IEEE binary16; arithmetic on it is done in float by the kernels.
using half = _Float16;

enum class DType : uint8_t {
  Bool,
  Int8,
  UInt8,
  Int16,
  UInt16,
  Int32,
  UInt32,
  Int64,
  UInt64,
  Float16,
  Float32,
  Float64,
  // Sub-byte integer types: packed in files, unpacked by the loader into one byte per
  // element (Int4 sign-extended), so kernels see plain uint8/int8 storage.
  Int4,
  UInt1,
  UInt2,
  UInt3,
  UInt4,
  UInt6,
  // Narrow float formats the weight format can hold; constants only (see float_formats.h).
  BFloat16,
  Float8E4M3FN,
  Float8E5M2,
  String,  // only for immediate string constants (attributes such as pad_type)
};

// Bytes one element occupies in engine memory (sub-byte types: one byte).
size_t dtype_size(DType dtype);
// numpy-style name: "float32", "float16", "int32", "bool", "uint4", ...
const char* dtype_name(DType dtype);
bool is_float(DType dtype);
bool is_integer(DType dtype);  // signed or unsigned integers, sub-byte included

}  // namespace coremlrt
