// The weight blob reader (blob storage v2): header, metadata records, data ranges and the
// sub-byte unpacking, for every record offset and several declared dtypes and shapes; and the
// same bytes read as a raw file (RAWDATA: a Core AI model's main.mlirb) at an offset and size
// taken from the input. Input: a weight.bin file.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "coremlrt/tensor.h"
#include "format/blob_file.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace coremlrt;
  const std::string path = fuzz::scratch_dir() + "/weight.bin";
  fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  fuzz::expect_only_errors([&] {
    auto file = format::BlobFile::open(path);
    // Records where the file has one (a sentinel), plus one offset taken from the input itself,
    // so that arbitrary offsets reach the bounds checks. Each failed read throws: reading every
    // 64-byte step with every dtype would spend the fuzzer's time on exceptions.
    std::vector<uint64_t> offsets;
    for (uint64_t offset = 64; offset + 4 <= size; offset += 64)
      if (data[offset] == 0xEF && data[offset + 1] == 0xBE && data[offset + 2] == 0xAD && data[offset + 3] == 0xDE)
        offsets.push_back(offset);
    if (size >= 16) {
      uint64_t chosen = 0;
      std::memcpy(&chosen, data + 8, sizeof chosen);
      offsets.push_back(chosen);
    }
    const DType dtypes[] = {DType::Float32, DType::Float16, DType::UInt8, DType::Int8, DType::Int4, DType::UInt2};
    if (size >= 32) {
      uint64_t raw_offset = 0, raw_count = 0;
      std::memcpy(&raw_offset, data + 16, sizeof raw_offset);
      std::memcpy(&raw_count, data + 24, sizeof raw_count);
      raw_offset %= size + 16;  // mostly inside the file, sometimes past it
      auto raw = format::BlobFile::open(path, format::BlobFile::Layout::Raw);
      for (DType dtype : dtypes) {
        fuzz::expect_only_errors([&] {
          Tensor t = raw->read_raw(raw_offset, dtype, {static_cast<int64_t>(raw_count % (size + 8))});
          volatile uint8_t sink = 0;
          for (size_t i = 0; i < t.nbytes(); ++i) sink = sink + static_cast<const uint8_t*>(t.data)[i];
        });
      }
    }
    for (uint64_t offset : offsets) {
      for (DType dtype : dtypes) {
        // The shape the record's declared size implies, and one it does not.
        uint64_t declared = 0;
        if (offset <= size && size - offset >= 16) std::memcpy(&declared, data + offset + 8, sizeof declared);
        const int bits = format::sub_byte_bits(dtype);
        const int64_t implied = static_cast<int64_t>(
            std::min<uint64_t>(bits ? declared * 8 / bits : declared / dtype_size(dtype), uint64_t{1} << 40));
        for (int64_t count : {implied, int64_t{3}}) {
          fuzz::expect_only_errors([&] {
            Tensor t = file->read(offset, dtype, {count});
            volatile uint8_t sink = 0;
            for (size_t i = 0; i < t.nbytes(); ++i) sink = sink + static_cast<const uint8_t*>(t.data)[i];
          });
        }
      }
    }
  });
  return 0;
}
