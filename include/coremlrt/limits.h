#pragma once
// Resource bounds a model is held to (docs/design/architecture.md, law 5: a hostile file gets an Error, not an
// out-of-memory kill or a hang). A model's limits are active on the thread that loads it or
// predicts with it (ResourceScope, set by Model); Tensor::empty charges every engine buffer to
// the active memory budget before allocating it, and while_loop counts its iterations against
// the active cap. They live here, below the kernels, so that ops and tensors read them without
// a parameter through every call.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace coremlrt {

// The default memory limit: the machine's physical memory (a model cannot usefully need more;
// asking for more would only end in the kernel's out-of-memory killer).
size_t default_memory_limit_bytes();

constexpr int64_t kDefaultMaxLoopIterations = 10'000'000;
// ML program blocks nested inside ops (cond, while_loop): deeper files are refused at load, so
// neither reading nor running a program recurses without bound.
constexpr int kMaxBlockNesting = 32;

// Engine memory (buffers, unpacked weights, outputs not yet freed) live for one model, against
// its limit. Shared by every thread predicting with the model; storages keep it alive.
class MemoryBudget {
 public:
  explicit MemoryBudget(size_t limit_bytes) : limit_(limit_bytes) {}
  // Throws Error saying how much was asked, how much is in use and the limit.
  void charge(size_t bytes);
  void release(size_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t limit() const { return limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

struct ResourceLimits {
  std::shared_ptr<MemoryBudget> memory;
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
};

// The limits active on this thread; null outside any model's load or prediction.
const ResourceLimits* active_limits();

// Makes `limits` the active ones on this thread for its lifetime (nests: restores the previous).
class ResourceScope {
 public:
  explicit ResourceScope(const ResourceLimits* limits);
  ~ResourceScope();
  ResourceScope(const ResourceScope&) = delete;
  ResourceScope& operator=(const ResourceScope&) = delete;

 private:
  const ResourceLimits* previous_;
};

}  // namespace coremlrt
