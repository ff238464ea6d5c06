#include "runtime/context_pool.h"

namespace coremlrt::runtime {

ContextPool::ContextPool(const Plan& plan, std::chrono::milliseconds linger) : plan_(plan), linger_(linger) {}

ContextPool::~ContextPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

ContextPool::Lease ContextPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      // Most recently used first: its buffers are the likeliest to be warm.
      std::unique_ptr<ExecutionContext> context = std::move(idle_.back().context);
      idle_.pop_back();
      return Lease(*this, std::move(context));
    }
    ++created_;
  }
  return Lease(*this, std::make_unique<ExecutionContext>(plan_));
}

void ContextPool::give_back(std::unique_ptr<ExecutionContext> context) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back({std::move(context), Clock::now()});
    if (linger_.count() < 0) return;  // lingering forever: no reaper
    if (!reaper_.joinable()) {
      reaper_ = std::thread([this] { reap_loop(); });
      return;
    }
    if (!reaper_idle_) return;
  }
  wake_.notify_one();
}

void ContextPool::reap_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (idle_.empty()) {
      reaper_idle_ = true;
      wake_.wait(lock);  // until give_back or the destructor
      reaper_idle_ = false;
      continue;
    }
    Clock::time_point oldest = idle_.front().since;
    for (const Idle& idle : idle_) oldest = std::min(oldest, idle.since);
    if (Clock::now() < oldest + linger_) {
      wake_.wait_until(lock, oldest + linger_);
      continue;
    }
    std::vector<std::unique_ptr<ExecutionContext>> expired;
    const Clock::time_point cutoff = Clock::now() - linger_;
    for (size_t i = 0; i < idle_.size();) {
      if (idle_[i].since <= cutoff) {
        expired.push_back(std::move(idle_[i].context));
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        ++reset_;
      } else {
        ++i;
      }
    }
    lock.unlock();
    expired.clear();  // free buffers without holding the pool lock
    lock.lock();
  }
}

ContextPoolStats ContextPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ContextPoolStats stats;
  stats.contexts_created = created_;
  stats.contexts_reset = reset_;
  stats.contexts_idle = idle_.size();
  for (const Idle& idle : idle_) stats.pooled_bytes += idle.context->pool().pooled_bytes();
  return stats;
}

}  // namespace coremlrt::runtime
