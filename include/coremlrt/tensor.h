#pragma once
// Tensor: a dtype, a shape and a pointer into memory kept alive by a shared Storage.
// Tensors are immutable once a kernel has produced them, so several tensors (a reshape
// and its input, say) may share one Storage safely.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coremlrt/dtype.h"

namespace coremlrt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[1, 64, 512]"

// Memory behind tensors. Heap storage is engine-owned and may be recycled by an execution
// context's pool; external storage is a view (a memory-mapped file, a caller's array)
// whose lifetime is held by an opaque owner handle.
class Storage {
 public:
  virtual ~Storage() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // True for heap memory that only the engine refers to, and that can therefore be
  // recycled or handed to a caller as an output without a copy.
  virtual bool engine_owned() const { return false; }
  // Marks memory shared for the lifetime of a model (its constants): never recycled,
  // never handed out without a copy.
  void freeze() { frozen_ = true; }

 protected:
  bool frozen_ = false;
  void* data_ = nullptr;
  size_t size_ = 0;
};

class MemoryBudget;

class HeapStorage final : public Storage {
 public:
  // 64-byte aligned, uninitialised. `charged`: the budget `bytes` were charged to (limits.h),
  // given back when the storage is freed.
  explicit HeapStorage(size_t bytes, std::shared_ptr<MemoryBudget> charged = nullptr);
  ~HeapStorage() override;
  bool engine_owned() const override { return !frozen_; }

 private:
  void allocate(size_t bytes);
  std::shared_ptr<MemoryBudget> charged_;
};

class ExternalStorage final : public Storage {
 public:
  // `owner` keeps [data, data + size) alive for as long as this storage exists.
  ExternalStorage(void* data, size_t size, std::shared_ptr<const void> owner);

 private:
  std::shared_ptr<const void> owner_;
};

struct Tensor {
  DType dtype = DType::Float32;
  Shape shape;
  std::shared_ptr<Storage> storage;
  void* data = nullptr;  // first element, inside storage

  // A new contiguous tensor on fresh heap storage (uninitialised).
  static Tensor empty(DType dtype, Shape shape);
  // A view of memory owned elsewhere; `owner` keeps it alive.
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner);

  bool defined() const { return storage != nullptr; }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return shape_numel(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  // Same data, another shape with the same element count (no copy).
  Tensor reshaped(Shape new_shape) const;
  // Deep copy into fresh heap storage.
  Tensor clone() const;
};

}  // namespace coremlrt
