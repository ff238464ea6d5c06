#pragma once
// Per-model pool of execution contexts, with Core ML's linger lifecycle done safely.
//
// predict() leases a context (creating one when none is idle) and gives it back when done.
// A context left idle longer than the linger period is destroyed by the pool's reaper
// thread, which returns its buffers, so a process that stops predicting goes back to its
// post-load memory. Contexts hold no caller memory between calls (the executor clears
// every slot), and the reaper never runs Python code nor waits on anything but the pool's
// own mutex, so it cannot deadlock or touch the interpreter.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/execute.h"

namespace coremlrt::runtime {

struct ContextPoolStats {
  size_t contexts_created = 0;
  size_t contexts_reset = 0;  // destroyed by the reaper after lingering
  size_t contexts_idle = 0;
  size_t pooled_bytes = 0;    // buffers held by idle contexts for reuse
};

class ContextPool {
 public:
  ContextPool(const Plan& plan, std::chrono::milliseconds linger);
  ~ContextPool();  // stops and joins the reaper
  ContextPool(const ContextPool&) = delete;
  ContextPool& operator=(const ContextPool&) = delete;

  class Lease {
   public:
    Lease(ContextPool& pool, std::unique_ptr<ExecutionContext> context) : pool_(pool), context_(std::move(context)) {}
    ~Lease() { pool_.give_back(std::move(context_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ExecutionContext& operator*() const { return *context_; }
    ExecutionContext* operator->() const { return context_.get(); }

   private:
    ContextPool& pool_;
    std::unique_ptr<ExecutionContext> context_;
  };

  Lease acquire();
  ContextPoolStats stats() const;
  std::chrono::milliseconds linger() const { return linger_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Idle {
    std::unique_ptr<ExecutionContext> context;
    Clock::time_point since;
  };
  void give_back(std::unique_ptr<ExecutionContext> context);
  void reap_loop();

  const Plan& plan_;
  const std::chrono::milliseconds linger_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Idle> idle_;
  size_t created_ = 0;
  size_t reset_ = 0;
  bool stopping_ = false;
  // The reaper sleeps without a deadline (nothing idle). Only then does give_back wake it: a
  // context given back expires last of all those idle, so a reaper already waiting for an
  // earlier deadline needs no wake-up, and a tight predict loop costs it no thread switch.
  bool reaper_idle_ = false;
  std::thread reaper_;  // started on the first give_back
};

}  // namespace coremlrt::runtime
