#include "coremlrt/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "coremlrt/error.h"

namespace coremlrt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

namespace {
// Buffers from this size up are mapped directly, so that freeing them always gives the
// pages back to the system (malloc may keep large freed chunks in its heap).
constexpr size_t kMapThreshold = 256 << 10;
}  // namespace

HeapStorage::HeapStorage(size_t bytes) {
  constexpr size_t kAlign = 64;
  size_ = bytes;
  if (bytes >= kMapThreshold) {
    void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    data_ = mapped;
    return;
  }
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  data_ = std::aligned_alloc(kAlign, rounded ? rounded : kAlign);
  if (!data_) throw std::bad_alloc();
}

HeapStorage::~HeapStorage() {
  if (size_ >= kMapThreshold) ::munmap(data_, size_);
  else std::free(data_);
}

ExternalStorage::ExternalStorage(void* data, size_t size, std::shared_ptr<const void> owner)
    : owner_(std::move(owner)) {
  data_ = data;
  size_ = size;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  for (int64_t d : t.shape) COREMLRT_CHECK(d >= 0, "negative dimension in shape ", shape_str(t.shape));
  t.storage = std::make_shared<HeapStorage>(t.nbytes());
  t.data = t.storage->data();
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.storage = std::make_shared<ExternalStorage>(data, t.nbytes(), std::move(owner));
  t.data = data;
  return t;
}

Tensor Tensor::reshaped(Shape new_shape) const {
  COREMLRT_CHECK(shape_numel(new_shape) == numel(), "cannot reshape ", shape_str(shape), " to ",
                 shape_str(new_shape));
  Tensor t = *this;
  t.shape = std::move(new_shape);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(dtype, shape);
  if (nbytes()) std::memcpy(t.data, data, nbytes());
  return t;
}

}  // namespace coremlrt
