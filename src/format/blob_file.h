#pragma once
// weight.bin ("blob storage v2"): a 64-byte header, then 64-byte metadata records each
// followed by its data. The file is memory-mapped and blobs are returned as views into the
// mapping (no copy); sub-byte blobs stay bit-packed (read_stored) unless a caller asks for
// one byte per element (read).
// A file of another layout (a Core AI model's main.mlirb, whose weights lie raw inside it:
// docs/design/coreai.md) is mapped as raw bytes, and its tensors read by offset (read_raw).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "coremlrt/tensor.h"

namespace coremlrt::format {

class BlobFile {
 public:
  // Storage: blob storage v2, header checked (read, read_stored). Raw: any bytes (read_raw).
  enum class Layout { Storage, Raw };
  // Maps the file read-only. Throws Error when it cannot be opened or, as Storage, has a bad
  // header.
  static std::shared_ptr<BlobFile> open(const std::string& path, Layout layout = Layout::Storage);
  // Like open(), but every caller in the process that opens the same unchanged file
  // (same device, inode, size and modification time) with the same layout while it is mapped
  // shares one mapping: instances of the functions of one package share their weights.
  static std::shared_ptr<BlobFile> open_shared(const std::string& path, Layout layout = Layout::Storage);
  // A weight file given as bytes (a model asset made in memory): copied once into aligned
  // engine memory, checked like a file; `name` stands for the path in messages.
  static std::shared_ptr<BlobFile> from_memory(const std::string& name, const std::string& bytes);
  // `size` bytes that `fill` writes once, kept in an unnamed file (O_TMPFILE) in `dir` and
  // mapped read-only as a weight file is (Raw layout): release_pages can drop their pages, and a
  // later read maps them again from the page cache or the disk. For an expanded copy that
  // another reader keeps for its lifetime but reads only once (an OpenVINO region's decoded
  // weights, read while it compiles: src/backends/openvino/backend.cc). Null, with nothing
  // left behind, where no such file can be made: `dir` on a file system held in memory (tmpfs,
  // ramfs: its pages could not be dropped), no O_TMPFILE, no room for `size` bytes.
  static std::shared_ptr<BlobFile> spill(const std::string& dir, size_t size, const std::function<void(uint8_t*)>& fill);
  ~BlobFile();

  // The blob whose metadata record starts at `metadata_offset`, as a tensor of `dtype`
  // and `shape`. Checks the sentinel, the stored dtype, and that the data lies inside the
  // file and holds exactly the elements of `shape`.
  // Sub-byte dtypes are unpacked into a new tensor, one byte per element (int4 sign-extended).
  Tensor read(uint64_t metadata_offset, DType dtype, const Shape& shape) const;
  // The same checks; the data as stored: for sub-byte dtypes the packed bytes (a uint8 view
  // of the mapping holding the elements LSB-first), for others what read() returns.
  Tensor read_stored(uint64_t metadata_offset, DType dtype, const Shape& shape) const;
  // The elements of `shape` stored at `offset` of a Raw file, as a view of the mapping. Checks
  // that they lie inside the file and that `offset` is a multiple of the element size (a view
  // must be aligned for its type); sub-byte dtypes are refused (no raw form defines their
  // packing).
  Tensor read_raw(uint64_t offset, DType dtype, const Shape& shape) const;

  // Drops the whole pages of [data, data + bytes) that lie in a weight file's mapping from this
  // process's memory (madvise MADV_DONTNEED); returns the bytes dropped. For weights that
  // another copy now serves (an OpenVINO region imported from the cache holds its own): a later
  // read maps the pages again from the file, so nothing is lost. Memory that is not such a
  // mapping (engine buffers, from_memory files) is left alone.
  static size_t release_pages(const void* data, size_t bytes);

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  uint32_t blob_count() const { return count_; }
  const uint8_t* bytes() const { return bytes_; }

 private:
  BlobFile() = default;
  std::string path_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint32_t count_ = 0;
  Layout layout_ = Layout::Storage;
  std::weak_ptr<const BlobFile> self_;
  std::shared_ptr<Storage> memory_;  // from_memory(): the bytes (else bytes_ is a file mapping)
};

// Unpacks LSB-first packed `bits`-wide elements (sign-extending when `is_signed`).
void unpack_sub_byte(const uint8_t* packed, int64_t count, int bits, bool is_signed, uint8_t* out);
// Bit width of a sub-byte dtype (0 for others).
int sub_byte_bits(DType dtype);

}  // namespace coremlrt::format
