#include "coremlrt/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "coremlrt/error.h"
#include "coremlrt/limits.h"

namespace coremlrt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    // A file can declare any dims: an element count past int64 is an error, never a wrap.
    if (__builtin_mul_overflow(n, d, &n)) fail_as(ErrorKind::ResourceLimit, "shape ", shape_str(shape), " has more elements than int64 can count");
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
constexpr size_t kHugePage = 2 << 20;
}  // namespace

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it (EINVAL)
#endif

HeapStorage::HeapStorage(size_t bytes, std::shared_ptr<MemoryBudget> charged) : charged_(std::move(charged)) {
  try {
    allocate(bytes);
  } catch (...) {
    if (charged_) charged_->release(bytes);
    throw;
  }
}

void HeapStorage::allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  size_ = bytes;
  if (bytes >= kMapThreshold) {
    // Buffers of 2 MiB and more in huge pages where the system allows them (transparent huge
    // pages in "madvise" mode). Either way the pages are made present at once rather than
    // faulted in one by one as the kernels first write them: a prediction's large outputs are
    // always fresh (the caller keeps them), and one fault per 4 KiB page cost more than the
    // kernel writing it (a GPT-2 prefill's logits, [1, 128, 50257] fp32, took 6,280 faults a
    // prediction, ~8% of its time; relu over [128, 3072] fp16 spent half its time in faults).
    // Engine buffers are written whole, so nothing is made present that would not be.
    const bool huge = bytes >= kHugePage;
    void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | (huge ? 0 : MAP_POPULATE), -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    if (huge) {  // advice only: errors are ignored (pages are then faulted in as written)
      ::madvise(mapped, bytes, MADV_HUGEPAGE);
      ::madvise(mapped, bytes, MADV_POPULATE_WRITE);
    }
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
  if (charged_) charged_->release(size_);
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
  size_t bytes = 0;
  COREMLRT_CHECK_AS(ErrorKind::ResourceLimit,
                    !__builtin_mul_overflow(static_cast<size_t>(shape_numel(t.shape)), dtype_size(dtype), &bytes),
                 "a ", dtype_name(dtype), " tensor of shape ", shape_str(t.shape), " needs more bytes than size_t can count");
  // Charged before allocating: a shape read from a file cannot take the machine's memory.
  const ResourceLimits* limits = active_limits();
  if (limits && limits->memory) {
    try {
      limits->memory->charge(bytes);
    } catch (const Error& e) {
      fail_as(e.kind(), "a ", dtype_name(dtype), " tensor of shape ", shape_str(t.shape), ": ", e.what());
    }
    t.storage = std::make_shared<HeapStorage>(bytes, limits->memory);
  } else {
    t.storage = std::make_shared<HeapStorage>(bytes);
  }
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
