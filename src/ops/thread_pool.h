#pragma once
// parallel_for over the process-wide intra-op pool (include/coremlrt/threads.h).
//
// The calling thread always runs a share of its own loop and only ever waits for ranges that
// a pool thread has already started, so any number of predictions may call parallel_for at
// once without deadlock, even when every pool thread is busy with another caller's loop. Pool
// threads run kernel code only: they never touch Python (docs/design/architecture.md, law 3) and take no lock
// that a caller holds while computing. A loop started from inside a pool thread runs on that
// thread alone.
#include <cstdint>
#include <type_traits>
#include <utility>

namespace coremlrt::ops {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`.
class RangeFunction {
 public:
  template <class Fn, class = std::enable_if_t<!std::is_same_v<std::remove_const_t<Fn>, RangeFunction>>>
  RangeFunction(Fn& fn)  // NOLINT: implicit so that lambdas pass straight through
      : object_(const_cast<std::remove_const_t<Fn>*>(&fn)),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<Fn*>(o))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(object_, begin, end); }

 private:
  void* object_;
  void (*call_)(void*, int64_t, int64_t);
};

// Threads a loop started on this thread may use now: the pool's size, capped by a
// ThreadLimit in force on this thread; 1 inside a pool thread.
int available_threads();

// Calls body(begin, end) on disjoint ranges that together cover [0, count), each at least
// `grain` long (but the last), spread over available_threads() threads including the caller,
// and returns when all have run. Runs body(0, count) on the caller when one thread would do.
// If ranges throw, the first exception is rethrown after every started range has finished.
void parallel_for_ranges(int64_t count, int64_t grain, RangeFunction body);

template <class Fn>
void parallel_for(int64_t count, int64_t grain, Fn&& body) {
  std::remove_reference_t<Fn>& fn = body;
  parallel_for_ranges(count, grain, RangeFunction(fn));
}

// Caps the threads that loops started on this thread use while it lives (0 or less: no cap).
// The runtime sets one around a prediction of a model loaded with LoadOptions::threads.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int previous_;
};

}  // namespace coremlrt::ops
