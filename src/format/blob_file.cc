#include "format/blob_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "coremlrt/error.h"

namespace coremlrt::format {

namespace {

constexpr uint32_t kSentinel = 0xDEADBEEF;
constexpr size_t kHeaderSize = 64;
constexpr size_t kMetadataSize = 64;

template <class T>
T load_le(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));  // the format and our targets are little-endian
  return value;
}

// BlobDataType numbers (docs/design/coreml-format.md, "Weight blobs") -> our dtypes.
bool blob_dtype(uint32_t code, DType* out) {
  switch (code) {
    case 1: *out = DType::Float16; return true;
    case 2: *out = DType::Float32; return true;
    case 3: *out = DType::UInt8; return true;
    case 4: *out = DType::Int8; return true;
    case 6: *out = DType::Int16; return true;
    case 7: *out = DType::UInt16; return true;
    case 8: *out = DType::Int4; return true;
    case 9: *out = DType::UInt1; return true;
    case 10: *out = DType::UInt2; return true;
    case 11: *out = DType::UInt4; return true;
    case 12: *out = DType::UInt3; return true;
    case 13: *out = DType::UInt6; return true;
    case 14: *out = DType::Int32; return true;
    case 15: *out = DType::UInt32; return true;
    case 5: *out = DType::BFloat16; return true;
    case 16: *out = DType::Float8E4M3FN; return true;
    case 17: *out = DType::Float8E5M2; return true;
    default: return false;
  }
}

}  // namespace

int sub_byte_bits(DType dtype) {
  switch (dtype) {
    case DType::UInt1: return 1;
    case DType::UInt2: return 2;
    case DType::UInt3: return 3;
    case DType::Int4:
    case DType::UInt4: return 4;
    case DType::UInt6: return 6;
    default: return 0;
  }
}

void unpack_sub_byte(const uint8_t* packed, int64_t count, int bits, bool is_signed, uint8_t* out) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t bit = static_cast<uint64_t>(i) * bits;
    uint64_t byte = bit / 8;
    unsigned shift = bit % 8;
    uint32_t word = packed[byte];
    if (shift + bits > 8) word |= static_cast<uint32_t>(packed[byte + 1]) << 8;
    uint32_t value = (word >> shift) & mask;
    if (is_signed && (value & (1u << (bits - 1)))) value |= ~mask;  // sign-extend
    out[i] = static_cast<uint8_t>(value);
  }
}

namespace {

// The weight files mapped now, as [begin, end) address ranges: release_pages drops only pages
// inside one (read-only private file mappings, which a page fault restores from the file).
// Never destroyed: a model held by a static object unmaps its files during static destruction,
// after a function-local map would be gone (fuzz/fuzz_predict.cc holds one so).
std::mutex& mappings_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<uintptr_t, uintptr_t>& mappings() {
  static auto* ranges = new std::map<uintptr_t, uintptr_t>;
  return *ranges;
}

}  // namespace

size_t BlobFile::release_pages(const void* data, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  std::lock_guard<std::mutex> lock(mappings_mutex());
  auto it = mappings().upper_bound(begin);
  if (it == mappings().begin()) return 0;
  --it;
  if (end > it->second) return 0;  // not wholly inside the mapping that holds `begin`
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last <= first) return 0;
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

std::shared_ptr<BlobFile> BlobFile::open(const std::string& path, Layout layout) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  COREMLRT_CHECK(fd >= 0, "cannot open weight file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat weight file '", path, "'");
  }
  std::shared_ptr<BlobFile> file(new BlobFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* mapped = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    COREMLRT_CHECK(mapped != MAP_FAILED, "cannot map weight file '", path, "': ", std::strerror(errno));
    file->bytes_ = static_cast<const uint8_t*>(mapped);
    std::lock_guard<std::mutex> lock(mappings_mutex());
    mappings()[reinterpret_cast<uintptr_t>(mapped)] = reinterpret_cast<uintptr_t>(mapped) + file->size_;
  } else {
    ::close(fd);
  }
  file->self_ = file;
  file->layout_ = layout;
  if (layout == Layout::Raw) return file;
  COREMLRT_CHECK(file->size_ >= kHeaderSize, "weight file '", path, "' is ", file->size_,
                 " bytes: too short for the 64-byte storage header");
  file->count_ = load_le<uint32_t>(file->bytes_);
  uint32_t version = load_le<uint32_t>(file->bytes_ + 4);
  COREMLRT_CHECK(version == 2, "weight file '", path, "' has storage version ", version,
                 "; expected 2");
  return file;
}

std::shared_ptr<BlobFile> BlobFile::from_memory(const std::string& name, const std::string& bytes) {
  std::shared_ptr<BlobFile> file(new BlobFile());
  file->path_ = name;
  file->size_ = bytes.size();
  file->memory_ = std::make_shared<HeapStorage>(bytes.size());  // 64-byte aligned, as a mapping is
  std::memcpy(file->memory_->data(), bytes.data(), bytes.size());
  file->memory_->freeze();
  file->bytes_ = static_cast<const uint8_t*>(file->memory_->data());
  file->self_ = file;
  COREMLRT_CHECK(file->size_ >= kHeaderSize, "weight file '", name, "' is ", file->size_,
                 " bytes: too short for the 64-byte storage header");
  file->count_ = load_le<uint32_t>(file->bytes_);
  uint32_t version = load_le<uint32_t>(file->bytes_ + 4);
  COREMLRT_CHECK(version == 2, "weight file '", name, "' has storage version ", version, "; expected 2");
  return file;
}

std::shared_ptr<BlobFile> BlobFile::spill(const std::string& dir, size_t size, const std::function<void(uint8_t*)>& fill) {
  if (dir.empty() || size == 0) return nullptr;
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0 || fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) return nullptr;
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  // Blocks reserved first: writing a shared mapping past the disk's room would raise SIGBUS.
  void* written = ::posix_fallocate(fd, 0, static_cast<off_t>(size)) == 0
                      ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
  if (written == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  try {
    fill(static_cast<uint8_t*>(written));
  } catch (...) {
    ::munmap(written, size);
    ::close(fd);
    throw;
  }
  ::munmap(written, size);
  // Mapped again as a weight file is (private, read-only), so that release_pages takes it.
  void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the unnamed file until it is unmapped
  if (mapped == MAP_FAILED) return nullptr;
  std::shared_ptr<BlobFile> file(new BlobFile());
  file->path_ = dir + " (an unnamed file of decoded weights)";
  file->size_ = size;
  file->bytes_ = static_cast<const uint8_t*>(mapped);
  file->layout_ = Layout::Raw;
  file->self_ = file;
  std::lock_guard<std::mutex> lock(mappings_mutex());
  mappings()[reinterpret_cast<uintptr_t>(mapped)] = reinterpret_cast<uintptr_t>(mapped) + size;
  return file;
}

std::shared_ptr<BlobFile> BlobFile::open_shared(const std::string& path, Layout layout) {
  struct stat st {};
  COREMLRT_CHECK(::stat(path.c_str(), &st) == 0, "cannot open weight file '", path, "': ", std::strerror(errno));
  const std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                          std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec) + (layout == Layout::Raw ? ":raw" : "");
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<BlobFile>> mapped;
  std::lock_guard<std::mutex> lock(mutex);
  if (std::shared_ptr<BlobFile> file = mapped[key].lock()) return file;
  for (auto it = mapped.begin(); it != mapped.end();) it = it->second.expired() ? mapped.erase(it) : std::next(it);
  std::shared_ptr<BlobFile> file = open(path, layout);
  mapped[key] = file;
  return file;
}

BlobFile::~BlobFile() {
  if (bytes_ && !memory_) {
    {
      std::lock_guard<std::mutex> lock(mappings_mutex());
      mappings().erase(reinterpret_cast<uintptr_t>(bytes_));
    }
    ::munmap(const_cast<uint8_t*>(bytes_), size_);
  }
}

Tensor BlobFile::read_stored(uint64_t metadata_offset, DType dtype, const Shape& shape) const {
  const std::string where = "weight file '" + path_ + "', blob at offset " + std::to_string(metadata_offset);
  COREMLRT_CHECK(layout_ == Layout::Storage, where, ": the file is raw data, read by offset (RAWDATA), not blobs");
  COREMLRT_CHECK(metadata_offset >= kHeaderSize && metadata_offset <= size_ &&
                     size_ - metadata_offset >= kMetadataSize,
                 where, ": the metadata record lies outside the file (", size_, " bytes)");
  const uint8_t* meta = bytes_ + metadata_offset;
  COREMLRT_CHECK(load_le<uint32_t>(meta) == kSentinel, where,
                 ": invalid sentinel (expected 0xDEADBEEF); the offset does not point at a blob");
  uint32_t code = load_le<uint32_t>(meta + 4);
  uint64_t size_in_bytes = load_le<uint64_t>(meta + 8);
  uint64_t data_offset = load_le<uint64_t>(meta + 16);
  uint64_t padding_bits = load_le<uint64_t>(meta + 24);
  DType stored;
  COREMLRT_CHECK(blob_dtype(code, &stored), where, ": unsupported blob data type code ", code);
  COREMLRT_CHECK(stored == dtype, where, ": stored as ", dtype_name(stored), " but the program declares ",
                 dtype_name(dtype));
  COREMLRT_CHECK(data_offset <= size_ && size_in_bytes <= size_ - data_offset, where, ": data [",
                 data_offset, ", +", size_in_bytes, ") runs past the end of the file (", size_, " bytes)");
  const int64_t count = shape_numel(shape);
  const int bits = sub_byte_bits(dtype);
  void* data = const_cast<uint8_t*>(bytes_ + data_offset);  // read-only mapping; tensors are immutable
  if (bits == 0) {
    COREMLRT_CHECK(size_in_bytes == static_cast<uint64_t>(count) * dtype_size(dtype), where, ": holds ",
                   size_in_bytes, " bytes but shape ", shape_str(shape), " of ", dtype_name(dtype),
                   " needs ", count * dtype_size(dtype));
    return Tensor::view(dtype, shape, data, self_.lock());
  }
  COREMLRT_CHECK(padding_bits < 8 && size_in_bytes * 8 >= padding_bits &&
                     size_in_bytes * 8 - padding_bits == static_cast<uint64_t>(count) * bits,
                 where, ": holds ", size_in_bytes * 8 - padding_bits, " bits but shape ", shape_str(shape),
                 " of ", dtype_name(dtype), " needs ", count * bits);
  return Tensor::view(DType::UInt8, {static_cast<int64_t>(size_in_bytes)}, data, self_.lock());
}

Tensor BlobFile::read_raw(uint64_t offset, DType dtype, const Shape& shape) const {
  const std::string where = "weight file '" + path_ + "', data at offset " + std::to_string(offset);
  COREMLRT_CHECK(layout_ == Layout::Raw, where, ": the file is blob storage, read by its metadata records (BLOBFILE)");
  COREMLRT_CHECK(sub_byte_bits(dtype) == 0, where, ": ", dtype_name(dtype),
                 " has no raw form (sub-byte values are read from blob storage)");
  const uint64_t element = dtype_size(dtype);
  COREMLRT_CHECK(offset % element == 0, where, ": not a multiple of the ", element, "-byte size of ",
                 dtype_name(dtype), " (a view must be aligned for its type)");
  const int64_t count = shape_numel(shape);
  COREMLRT_CHECK(count >= 0 && static_cast<uint64_t>(count) <= (UINT64_MAX / element), where, ": shape ",
                 shape_str(shape), " is too large");
  const uint64_t bytes = static_cast<uint64_t>(count) * element;
  COREMLRT_CHECK(offset <= size_ && bytes <= size_ - offset, where, ": ", bytes, " bytes of ", shape_str(shape),
                 " ", dtype_name(dtype), " run past the end of the file (", size_, " bytes)");
  void* data = const_cast<uint8_t*>(bytes_ + offset);  // read-only mapping; tensors are immutable
  return Tensor::view(dtype, shape, data, self_.lock());
}

Tensor BlobFile::read(uint64_t metadata_offset, DType dtype, const Shape& shape) const {
  Tensor stored = read_stored(metadata_offset, dtype, shape);
  const int bits = sub_byte_bits(dtype);
  if (bits == 0) return stored;
  Tensor unpacked = Tensor::empty(dtype, shape);
  unpack_sub_byte(stored.ptr<uint8_t>(), shape_numel(shape), bits, dtype == DType::Int4, unpacked.ptr<uint8_t>());
  return unpacked;
}

}  // namespace coremlrt::format
