#include "format/blob_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "coremlrt/error.h"
#include "coremlrt/float_formats.h"
#include <cmath>

namespace coremlrt::format {
namespace {

// Writes a blob-storage v2 file by hand, exactly as the format describes it.
class BlobWriter {
 public:
  BlobWriter() : bytes_(64, 0) { put32(4, 2); }
  // Returns the metadata offset of the new blob.
  uint64_t add(uint32_t blob_dtype, const void* data, uint64_t size, uint64_t padding_bits = 0) {
    bytes_.resize((bytes_.size() + 63) / 64 * 64, 0);
    uint64_t meta = bytes_.size();
    bytes_.resize(meta + 64 + size, 0);
    put32(meta, 0xDEADBEEF);
    put32(meta + 4, blob_dtype);
    put64(meta + 8, size);
    put64(meta + 16, meta + 64);
    put64(meta + 24, padding_bits);
    std::memcpy(bytes_.data() + meta + 64, data, size);
    put32(0, ++count_);
    return meta;
  }
  std::string save(const std::string& name) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
    return path;
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  void put32(uint64_t at, uint32_t v) { std::memcpy(bytes_.data() + at, &v, 4); }
  void put64(uint64_t at, uint64_t v) { std::memcpy(bytes_.data() + at, &v, 8); }
  std::vector<uint8_t> bytes_;
  uint32_t count_ = 0;
};

TEST(BlobFile, ReadsFloat32AsViewIntoMapping) {
  BlobWriter writer;
  float values[12];
  for (int i = 0; i < 12; ++i) values[i] = 0.5f * i;
  uint64_t offset = writer.add(2, values, sizeof(values));
  auto file = BlobFile::open(writer.save("f32.bin"));
  Tensor t = file->read(offset, DType::Float32, {3, 4});
  EXPECT_FALSE(t.storage->engine_owned());  // a view, not a copy
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(t.ptr<float>()[i], 0.5f * i);
}

TEST(BlobFile, UnpacksSubByteTypes) {
  BlobWriter writer;
  // int4 values -8, 7, -1, 3 packed LSB first: 0x78, 0x3F.
  const uint8_t int4[] = {0x78, 0x3F};
  uint64_t a = writer.add(8, int4, sizeof(int4));
  // uint3 values 1..5 (15 bits, 1 padding bit): bits 001 010 011 100 101 from the LSB.
  const uint8_t uint3[] = {0b11010001, 0b01011000};
  uint64_t b = writer.add(12, uint3, sizeof(uint3), 1);
  auto file = BlobFile::open(writer.save("sub.bin"));
  Tensor t4 = file->read(a, DType::Int4, {4});
  EXPECT_EQ(std::vector<int8_t>(t4.ptr<int8_t>(), t4.ptr<int8_t>() + 4), (std::vector<int8_t>{-8, 7, -1, 3}));
  Tensor t3 = file->read(b, DType::UInt3, {5});
  EXPECT_EQ(std::vector<uint8_t>(t3.ptr<uint8_t>(), t3.ptr<uint8_t>() + 5), (std::vector<uint8_t>{1, 2, 3, 4, 5}));
}

TEST(BlobFile, RejectsDamage) {
  BlobWriter writer;
  float values[4] = {1, 2, 3, 4};
  uint64_t offset = writer.add(2, values, sizeof(values));
  auto file = BlobFile::open(writer.save("ok.bin"));
  EXPECT_THROW(file->read(offset, DType::Float16, {8}), Error);      // stored dtype differs
  EXPECT_THROW(file->read(offset, DType::Float32, {5}), Error);      // size does not match shape
  EXPECT_THROW(file->read(offset + 8, DType::Float32, {4}), Error);  // no sentinel there
  EXPECT_THROW(file->read(1 << 20, DType::Float32, {4}), Error);     // past the end

  writer.bytes().resize(offset + 64 + 8);  // data cut short
  auto cut = BlobFile::open(writer.save("cut.bin"));
  try {
    cut->read(offset, DType::Float32, {4});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs past the end of the file"), std::string::npos) << e.what();
  }
}

TEST(BlobFile, RejectsBadHeader) {
  std::string path = ::testing::TempDir() + "/short.bin";
  std::ofstream(path, std::ios::binary) << "tiny";
  EXPECT_THROW(BlobFile::open(path), Error);
  BlobWriter writer;
  writer.bytes()[4] = 1;  // storage version 1
  EXPECT_THROW(BlobFile::open(writer.save("v1.bin")), Error);
  EXPECT_THROW(BlobFile::open(::testing::TempDir() + "/does-not-exist.bin"), Error);
}

// Pages of a weight file's mapping dropped from memory come back from the file, unchanged, when
// read again; memory outside every mapping is left alone.
TEST(BlobFile, ReleasedPagesReadBackFromTheFile) {
  BlobWriter writer;
  std::vector<float> values(1 << 16);  // 256 KiB: many whole pages
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  const uint64_t offset = writer.add(2, values.data(), values.size() * sizeof(float));
  auto file = BlobFile::open(writer.save("release.bin"));
  Tensor t = file->read(offset, DType::Float32, {static_cast<int64_t>(values.size())});
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += t.ptr<float>()[i];  // every page resident
  EXPECT_GT(sum, 0.0);
  const size_t released = BlobFile::release_pages(t.data, t.nbytes());
  EXPECT_GE(released, t.nbytes() - 2 * 4096);
  EXPECT_LE(released, t.nbytes());
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(t.ptr<float>()[i], values[i]) << i;
  // A range that runs past the mapping, and engine memory, are not released.
  EXPECT_EQ(BlobFile::release_pages(file->bytes(), file->size() + 4096), 0u);
  std::vector<float> heap(values);
  EXPECT_EQ(BlobFile::release_pages(heap.data(), heap.size() * sizeof(float)), 0u);
  EXPECT_EQ(heap, values);
}

// Bytes spilled to an unnamed file read back as written, before and after their pages leave
// memory; a file system held in memory, a folder that does not exist and a failed fill leave
// nothing behind.
TEST(BlobFile, SpilledBytesReadBackFromTheirFile) {
  std::vector<float> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const size_t bytes = values.size() * sizeof(float);
  auto file = BlobFile::spill(::testing::TempDir(), bytes, [&](uint8_t* data) { std::memcpy(data, values.data(), bytes); });
  if (!file) GTEST_SKIP() << ::testing::TempDir() << " takes no unnamed files on a disk";
  EXPECT_EQ(file->size(), bytes);
  Tensor t = file->read_raw(0, DType::Float32, {static_cast<int64_t>(values.size())});
  EXPECT_FALSE(t.storage->engine_owned());
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(t.ptr<float>()[i], values[i]) << i;
  EXPECT_GE(BlobFile::release_pages(t.data, t.nbytes()), bytes - 2 * 4096);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(t.ptr<float>()[i], values[i]) << i;
  EXPECT_EQ(BlobFile::spill("/dev/shm", bytes, [](uint8_t*) { FAIL() << "filled a file in memory"; }), nullptr);
  EXPECT_EQ(BlobFile::spill(::testing::TempDir() + "/no such folder", bytes, [](uint8_t*) {}), nullptr);
  EXPECT_EQ(BlobFile::spill("", bytes, [](uint8_t*) {}), nullptr);
  EXPECT_THROW(BlobFile::spill(::testing::TempDir(), bytes, [](uint8_t*) { fail("decoding failed"); }), Error);
}

// A weight file held by a static object is unmapped during static destruction, after objects
// made on first use are gone: its release from the registry of mappings must still work (under
// ASan a destroyed registry is a use after free at this process's exit; fuzz/fuzz_predict.cc
// holds its model so).
std::shared_ptr<BlobFile> held_until_exit;

TEST(BlobFile, AFileHeldUntilExitIsUnmappedCleanly) {
  BlobWriter writer;
  const float value = 1.5f;
  const uint64_t offset = writer.add(2, &value, sizeof value);
  held_until_exit = BlobFile::open(writer.save("held.bin"));
  EXPECT_EQ(held_until_exit->read(offset, DType::Float32, {1}).ptr<float>()[0], value);
}

// A raw file (a Core AI model's main.mlirb): tensors are read by the offset of their bytes, with
// no header or records, as views; out-of-range, misaligned and sub-byte reads are refused.
TEST(BlobFile, RawFilesAreReadByOffset) {
  std::vector<uint8_t> bytes(100, 0xCB);
  const float values[4] = {1.5f, -2.0f, 0.25f, 8.0f};
  std::memcpy(bytes.data() + 20, values, sizeof(values));
  const std::string path = ::testing::TempDir() + "/raw.mlirb";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto file = BlobFile::open_shared(path, BlobFile::Layout::Raw);
  Tensor t = file->read_raw(20, DType::Float32, {2, 2});
  EXPECT_FALSE(t.storage->engine_owned());
  EXPECT_EQ(t.data, file->bytes() + 20);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.ptr<float>()[i], values[i]);
  Tensor last = file->read_raw(96, DType::UInt8, {4});  // up to the last byte
  EXPECT_EQ(last.ptr<uint8_t>()[3], 0xCB);
  EXPECT_THROW(file->read_raw(98, DType::Float16, {2}), Error);               // past the end
  EXPECT_THROW(file->read_raw(uint64_t{1} << 62, DType::UInt8, {1}), Error);  // far past it
  EXPECT_THROW(file->read_raw(22, DType::Float32, {1}), Error);               // misaligned
  EXPECT_THROW(file->read_raw(20, DType::Int4, {2}), Error);                  // no raw sub-byte form
  EXPECT_THROW(file->read_stored(64, DType::Float32, {1}), Error);            // not blob storage
  // The same file opened as blob storage is another mapping, and has no header to accept.
  EXPECT_NE(BlobFile::open_shared(path, BlobFile::Layout::Raw), nullptr);
  EXPECT_THROW(BlobFile::open_shared(path), Error);
  BlobWriter writer;
  uint64_t offset = writer.add(2, values, sizeof(values));
  auto storage = BlobFile::open(writer.save("storage.bin"));
  EXPECT_THROW(storage->read_raw(offset + 64, DType::Float32, {4}), Error);  // blobs are read by record
}

}  // namespace
}  // namespace coremlrt::format

namespace coremlrt::format {
namespace {

TEST(BlobFile, ReadsNarrowFloatFormatsAsViews) {
  BlobWriter writer;
  const uint16_t bf16[] = {0x3F80, 0xC040};  // 1.0, -3.0
  const uint8_t e4m3[] = {0x38, 0xC4, 0x7F, 0x01};  // 1.0, -3.0, NaN, 2^-9
  const uint8_t e5m2[] = {0x3C, 0x7C, 0xC2};  // 1.0, inf, -3.0
  uint64_t a = writer.add(5, bf16, sizeof(bf16));
  uint64_t b = writer.add(16, e4m3, sizeof(e4m3));
  uint64_t c = writer.add(17, e5m2, sizeof(e5m2));
  auto file = BlobFile::open(writer.save("narrow.bin"));
  Tensor tb = file->read(a, DType::BFloat16, {2});
  EXPECT_EQ(bfloat16_to_float(tb.ptr<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(bfloat16_to_float(tb.ptr<uint16_t>()[1]), -3.0f);
  Tensor t4 = file->read(b, DType::Float8E4M3FN, {4});
  EXPECT_EQ(float8_e4m3fn_to_float(t4.ptr<uint8_t>()[0]), 1.0f);
  EXPECT_EQ(float8_e4m3fn_to_float(t4.ptr<uint8_t>()[1]), -3.0f);
  EXPECT_TRUE(std::isnan(float8_e4m3fn_to_float(t4.ptr<uint8_t>()[2])));
  EXPECT_EQ(float8_e4m3fn_to_float(t4.ptr<uint8_t>()[3]), std::ldexp(1.0f, -9));
  Tensor t5 = file->read(c, DType::Float8E5M2, {3});
  EXPECT_EQ(float8_e5m2_to_float(t5.ptr<uint8_t>()[0]), 1.0f);
  EXPECT_TRUE(std::isinf(float8_e5m2_to_float(t5.ptr<uint8_t>()[1])));
  EXPECT_EQ(float8_e5m2_to_float(t5.ptr<uint8_t>()[2]), -3.0f);
}

}  // namespace
}  // namespace coremlrt::format
