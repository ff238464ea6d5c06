#include "coremlrt/dtype.h"

namespace coremlrt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::UInt32:
    case DType::Float32:
      return 4;
    case DType::Int64:
    case DType::UInt64:
    case DType::Float64:
      return 8;
    case DType::String:
      return 0;
    default:
      return 1;
  }
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Int16: return "int16";
    case DType::UInt16: return "uint16";
    case DType::Int32: return "int32";
    case DType::UInt32: return "uint32";
    case DType::Int64: return "int64";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int4: return "int4";
    case DType::UInt1: return "uint1";
    case DType::UInt2: return "uint2";
    case DType::UInt3: return "uint3";
    case DType::UInt4: return "uint4";
    case DType::UInt6: return "uint6";
    case DType::BFloat16: return "bfloat16";
    case DType::Float8E4M3FN: return "float8_e4m3fn";
    case DType::Float8E5M2: return "float8_e5m2";
    case DType::String: return "string";
  }
  return "unknown";
}

bool is_float(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::Float32 || dtype == DType::Float64 ||
         dtype == DType::BFloat16 || dtype == DType::Float8E4M3FN || dtype == DType::Float8E5M2;
}

bool is_integer(DType dtype) {
  return !is_float(dtype) && dtype != DType::Bool && dtype != DType::String;
}

}  // namespace coremlrt
