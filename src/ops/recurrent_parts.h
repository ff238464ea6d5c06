#pragma once
// The parts of the recurrent layers (recurrent.cc) that are not one layer's: the x86 dot
// products that sum as gemm sums (recurrent_dots.cc) and the loop that runs a sequence's time
// steps in parallel blocks. Internal to src/ops.
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "ops/thread_pool.h"

// On x86-64 (GCC) some functions below have versions for newer CPUs, as in ops/gemm.cc, and
// as there COREMLRT_GEMM_PORTABLE_ONLY (the TSan build: CMakeLists.txt) leaves only the plain
// code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_RECURRENT_X86_V3 1
#include <immintrin.h>
#endif

namespace coremlrt::ops::recurrent_parts {

#ifdef COREMLRT_RECURRENT_X86_V3
#define COREMLRT_RECURRENT_DOTS 1
// The kernels of recurrent_dots.cc compute C[r, j] += dot(A[r, :], W[j, :]) for rows of a
// row-major W whose length K is a multiple of 8, with each element summed exactly as gemm's
// x86-64-v3 and v4 dot forms sum it (dot_tile and dot_tile_pairs in ops/gemm_dot.cc). So their
// results are those of the gemm call they replace.

// The recurrent product of one block of hidden units for a single row of h:
// g[q*n + i] = x[q*H + i] + dot(h, w[(q*H + i) * H ...]) for the gates q < `gates` and units
// i < n (n and H multiples of 8), w pointing at the block's first row.
__attribute__((target("arch=x86-64-v3"))) void gate_dots(const float* h, const float* w, int64_t H, int64_t n,
                                                        int64_t gates, const float* x, float* g);
// C[M, N] += A[M, K] . W[N, K]^T for N and K multiples of 8 and ldw == K (the input projection
// of all steps), fetching `ahead_bytes` from `ahead` on towards L2 meanwhile.
__attribute__((target("arch=x86-64-v4"))) void project_dots(int64_t M, int64_t N, int64_t K, const float* A,
                                                           int64_t lda, const float* W, float* C, int64_t ldc,
                                                           const char* ahead, int64_t ahead_bytes);
// Whether gemm takes its fused multiply-add versions on this CPU, which the kernels above
// reproduce; project_dots also needs x86-64-v4.
bool have_gate_dots();
bool have_project_dots();
#endif

// ---- Time steps split into blocks that run in parallel.

// The blocks of the steps of one sequence, shared by the threads that run them. One pool loop
// serves the whole sequence rather than one per step: each thread claims blocks of the current
// step from atomic cursors, and the thread that finishes a step's last block opens the next
// step. A thread waits only for blocks another thread has claimed and is running, so a pool
// thread that joins late, or never, just leaves more blocks to the others (as
// ops/thread_pool.h requires of loops).
//
// Blocks are split into one range per part. A part claims from its own range first: from the
// front on even steps and from the back on odd ones, so that it starts on the weight rows it
// read last; then it takes what is left of the other ranges from their other end.
class StepLoop {
 public:
  StepLoop(int64_t steps, int64_t blocks, int parts)
      : steps_(steps), blocks_(blocks), parts_(parts), cursors_(new Cursor[static_cast<size_t>(parts)]) {
    open(0);
  }

  // Runs body(part, k, b) for the blocks this thread claims, from the current step to the last.
  template <class Body>
  void take_part(int part, Body& body) {
    for (int64_t k = ready_.load(std::memory_order_acquire); k < steps_;) {
      int64_t ran = 0;
      try {
        for (int i = 0; i < parts_; ++i) {
          const int range = (part + i) % parts_;
          const bool from_front = (i == 0) == (k % 2 == 0);
          for (int64_t b = 0; claim(range, k, from_front, b); ++ran) body(part, k, b);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
        return;
      }
      if (ran > 0 && finished_.fetch_add(ran, std::memory_order_acq_rel) + ran == (k + 1) * blocks_) {
        open(k + 1);
        ready_.store(k + 1, std::memory_order_release);
      }
      ++k;
      // Spin: a step takes microseconds, far less than a sleep and a wake-up. Yielding now
      // and then lets the thread waited for run where threads outnumber cores.
      for (int polls = 1; ready_.load(std::memory_order_acquire) < k; ++polls) {
        if (failed_.load(std::memory_order_relaxed)) return;
        if (polls % 256 == 0) std::this_thread::yield();
        else cpu_relax();
      }
    }
  }

  void rethrow() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // A range's unclaimed blocks [front, back) in step `step`: step << 32 | front << 16 | back.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> bits{0};
  };

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void open(int64_t k) {
    for (int r = 0; r < parts_; ++r) {
      const uint64_t front = static_cast<uint64_t>(r * blocks_ / parts_);
      const uint64_t back = static_cast<uint64_t>((r + 1) * blocks_ / parts_);
      cursors_[r].bits.store(static_cast<uint64_t>(static_cast<uint32_t>(k)) << 32 | front << 16 | back,
                             std::memory_order_relaxed);
    }
  }

  bool claim(int range, int64_t k, bool from_front, int64_t& block) {
    std::atomic<uint64_t>& cursor = cursors_[range].bits;
    uint64_t bits = cursor.load(std::memory_order_relaxed);
    for (;;) {
      // A cursor already opened for a later step means that step k is all done.
      if (bits >> 32 != static_cast<uint32_t>(k)) return false;
      const int64_t front = static_cast<int64_t>(bits >> 16 & 0xffff), back = static_cast<int64_t>(bits & 0xffff);
      if (front >= back) return false;
      const uint64_t next = from_front ? bits + (uint64_t{1} << 16) : bits - 1;
      if (cursor.compare_exchange_weak(bits, next, std::memory_order_relaxed)) {
        block = from_front ? front : back - 1;
        return true;
      }
    }
  }

  const int64_t steps_, blocks_;
  const int parts_;
  std::unique_ptr<Cursor[]> cursors_;
  alignas(64) std::atomic<int64_t> finished_{0};  // blocks run, over all steps
  alignas(64) std::atomic<int64_t> ready_{0};     // the step whose cursors are open
  std::atomic<bool> failed_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The most blocks a step may have (StepLoop's cursors count them in 16 bits).
constexpr int64_t kMaxBlocks = 1 << 15;

// Runs body(part, k, b) for every step k in [0, steps) and block b in [0, blocks), all blocks
// of step k before any of step k+1, on up to `parts` threads; `part` tells apart the threads
// running at once (for their scratch buffers). Since the blocks of a step are independent, the
// results do not depend on which thread runs which.
template <class Body>
void for_each_step(int64_t steps, int64_t blocks, int parts, Body&& body) {
  if (parts <= 1) {  // in StepLoop's order
    for (int64_t k = 0; k < steps; ++k)
      for (int64_t i = 0; i < blocks; ++i) body(0, k, k % 2 == 0 ? i : blocks - 1 - i);
    return;
  }
  StepLoop loop(steps, blocks, parts);
  parallel_for(parts, 1, [&](int64_t begin, int64_t end) {
    // A product started inside a block stays on this thread (the others are busy here).
    ThreadLimit single(1);
    for (int64_t part = begin; part < end; ++part) loop.take_part(static_cast<int>(part), body);
  });
  loop.rethrow();
}

// Constant weights of one direction. W_ih [G*H, I] and W_hh [G*H, H] are the constant tensors
// themselves (views of weight.bin), read in place: x @ W_ih^T and each step's h @ W_hh^T are

}  // namespace coremlrt::ops::recurrent_parts
