#include "coremlrt/limits.h"

#include <unistd.h>

#include "coremlrt/error.h"

namespace coremlrt {

namespace {
thread_local const ResourceLimits* t_active = nullptr;
}  // namespace

size_t default_memory_limit_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return SIZE_MAX;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

void MemoryBudget::charge(size_t bytes) {
  size_t used = used_.fetch_add(bytes, std::memory_order_relaxed);
  if (bytes > limit_ || used > limit_ - bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    fail_as(ErrorKind::ResourceLimit, "needs ", bytes, " bytes for a tensor while ", used, " are in use; the model's memory limit is ", limit_,
         " bytes (memory_limit_bytes)");
  }
}

const ResourceLimits* active_limits() { return t_active; }

ResourceScope::ResourceScope(const ResourceLimits* limits) : previous_(t_active) { t_active = limits; }
ResourceScope::~ResourceScope() { t_active = previous_; }

}  // namespace coremlrt
