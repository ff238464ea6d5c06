#pragma once
// SHA-256 (FIPS 180-4), for the content keys other tools write beside a file: a Core AI model's
// main.hash is the raw SHA-256 of its main.mlirb (src/format/coreai_asset.cc).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace coremlrt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  // The digest of everything given to update(); the object is spent afterwards.
  std::array<uint8_t, 32> finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes
};

// Lower-case hex of `bytes`.
std::string to_hex(const uint8_t* bytes, size_t size);

}  // namespace coremlrt
