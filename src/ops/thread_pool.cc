// The process-wide intra-op pool behind parallel_for (thread_pool.h) and set_num_threads
// (include/coremlrt/threads.h).
//
// A loop is split into chunks that threads claim one at a time from an atomic counter, so a
// thread slowed down by other work on the machine simply claims fewer. The caller claims
// chunks like the pool threads do and then waits only for chunks already claimed: a loop
// finishes even if no pool thread ever looks at it, which is what makes concurrent callers
// (and a process forked while threads were busy) safe.
#include "ops/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "coremlrt/threads.h"

namespace coremlrt::ops {

namespace {

thread_local bool t_in_pool_thread = false;
thread_local int t_thread_limit = 0;

// Chunks per participating thread: a few, so that threads slowed down by other processes on
// the machine (or running other callers' loops) leave more chunks to the others.
constexpr int64_t kChunksPerThread = 4;

// How long a thread polls for what it waits for before it blocks on a condition variable. A
// network of many small ops hands the pool a loop every few tens of microseconds, and waking a
// sleeping thread through a futex costs about as much again on a virtual machine. Polling made
// lstm2 fp16 (whose every recurrent step is a small threaded GEMM), resnet18 and mobilenet_v2
// fp32 faster at 2 threads on our kernels (docs/reports/performance.md, "Measurements behind code choices").
// Short, so that a pool thread left polling when a prediction
// ends, or when an OpenVINO region (whose threads are not ours) starts, takes little from
// anyone (docs/reports/performance.md, "Measurements behind code choices").
constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();  // lets the core's other hardware thread run while this one polls
#else
  std::this_thread::yield();
#endif
}

// Returns once ready() holds or kSpin has passed; the caller then blocks if it must.
template <class Ready>
void spin_until(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int polls = 1; !ready(); ++polls) {
    cpu_relax();
    if (polls % 16 == 0 && std::chrono::steady_clock::now() >= until) return;
  }
}

int machine_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

int default_threads() {
  if (const char* env = std::getenv("COREMLRT_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0) return static_cast<int>(std::min<long>(n, 1024));
  }
  return machine_cores();
}

// One parallel_for call: shared by the caller and the pool threads that join it.
struct Loop {
  Loop(RangeFunction b, int64_t n, int64_t size, int64_t count_of_chunks)
      : body(b), count(n), chunk_size(size), chunks(count_of_chunks) {}

  const RangeFunction body;
  const int64_t count, chunk_size, chunks;
  std::atomic<int64_t> next_chunk{0};
  int helpers_wanted = 0;  // pool threads that may still join; guarded by the pool's mutex

  std::mutex mutex;
  std::condition_variable all_done;
  int64_t done = 0;          // chunks finished; guarded by mutex
  std::exception_ptr error;  // the first exception a chunk threw; guarded by mutex
  std::atomic<bool> finished{false};  // done == chunks, for wait()'s spin before it blocks

  // Claims and runs chunks until none is left unclaimed.
  void run_chunks() {
    int64_t ran = 0;
    std::exception_ptr failure;
    for (int64_t chunk; (chunk = next_chunk.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t begin = chunk * chunk_size;
      try {
        body(begin, std::min(count, begin + chunk_size));
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
      ++ran;
    }
    if (ran == 0) return;
    // The mutex also publishes this thread's results to the caller waiting in wait().
    std::lock_guard<std::mutex> lock(mutex);
    if (failure && !error) error = failure;
    done += ran;
    if (done == chunks) {
      finished.store(true, std::memory_order_relaxed);
      all_done.notify_all();
    }
  }

  void wait() {
    // The pool thread's last chunk usually ends within microseconds of the caller's: poll
    // first, so that the caller is not put to sleep and woken again (spin_until).
    spin_until([this] { return finished.load(std::memory_order_relaxed); });
    std::unique_lock<std::mutex> lock(mutex);  // also makes the pool threads' results visible
    all_done.wait(lock, [this] { return done == chunks; });
  }
};

class Pool {
 public:
  // Never destroyed: a daemon thread may still be inside a loop while the process exits,
  // and pool threads blocked on the condition variable are simply ended by exit. A child
  // made by fork() has none of its parent's pool threads (and maybe a mutex some thread held
  // at the fork), so it starts a fresh pool of the same size and leaves the old one alone.
  static Pool& instance() {
    static const bool registered = [] {
      pthread_atfork(nullptr, nullptr, [] {
        Pool* old = current_.load(std::memory_order_relaxed);
        current_.store(new Pool(old->size()), std::memory_order_release);
      });
      return true;
    }();
    (void)registered;
    return *current_.load(std::memory_order_acquire);
  }

  int size() const { return size_.load(std::memory_order_relaxed); }

  void resize(int threads) {
    std::lock_guard<std::mutex> resizing(resize_mutex_);
    std::vector<std::unique_ptr<Worker>> retired;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_.store(threads, std::memory_order_relaxed);
      while (static_cast<int>(workers_.size()) > threads - 1) {
        workers_.back()->retired = true;
        retired.push_back(std::move(workers_.back()));
        workers_.pop_back();
      }
    }
    if (retired.empty()) return;
    wake_.notify_all();
    // A retired thread finishes the chunk it is running (its loop's caller waits for it
    // anyway), then exits; new threads are started on demand by later loops.
    for (auto& worker : retired) worker->thread.join();
  }

  void run(int64_t count, int64_t grain, RangeFunction body, int threads) {
    const int64_t most_chunks = (count + grain - 1) / grain;
    if (threads <= 1 || most_chunks <= 1) {
      body(0, count);
      return;
    }
    const int64_t wanted = std::min(most_chunks, threads * kChunksPerThread);
    const int64_t chunk_size = (count + wanted - 1) / wanted;
    auto loop = std::make_shared<Loop>(body, count, chunk_size, (count + chunk_size - 1) / chunk_size);
    const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, loop->chunks - 1));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_workers();
      loop->helpers_wanted = helpers;
      loops_.push_back(loop);
      loops_waiting_.store(loops_.size(), std::memory_order_relaxed);
    }
    if (helpers == 1) wake_.notify_one();
    else wake_.notify_all();
    loop->run_chunks();
    {
      // Every chunk is claimed: pool threads that have not joined yet need not.
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = std::find(loops_.begin(), loops_.end(), loop);
      if (it != loops_.end()) loops_.erase(it);
      loops_waiting_.store(loops_.size(), std::memory_order_relaxed);
    }
    loop->wait();
    if (loop->error) std::rethrow_exception(loop->error);
  }

 private:
  struct Worker {
    std::thread thread;
    bool retired = false;  // guarded by the pool's mutex
  };

  explicit Pool(int threads) : size_(threads) {}

  // Starts pool threads up to size() - 1 (the caller is the last one). Called with mutex_
  // held. A thread that cannot be started is not an error: loops run with fewer threads.
  void start_workers() {
    while (static_cast<int>(workers_.size()) < size() - 1) {
      auto worker = std::make_unique<Worker>();
      try {
        worker->thread = std::thread([this, w = worker.get()] { work(w); });
      } catch (const std::system_error&) {
        return;
      }
      workers_.push_back(std::move(worker));
    }
  }

  void work(Worker* self) {
    t_in_pool_thread = true;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (loops_.empty() && !self->retired) {
        // Poll for the next loop a while before sleeping (kSpin says why).
        lock.unlock();
        spin_until([this] { return loops_waiting_.load(std::memory_order_relaxed) > 0; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return self->retired || !loops_.empty(); });
      if (self->retired) return;
      std::shared_ptr<Loop> loop = loops_.front();
      if (--loop->helpers_wanted <= 0) loops_.pop_front();
      loops_waiting_.store(loops_.size(), std::memory_order_relaxed);
      lock.unlock();
      loop->run_chunks();
      loop.reset();
      lock.lock();
    }
  }

  std::mutex resize_mutex_;  // one resize at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Loop>> loops_;         // loops still wanting helpers, oldest first
  std::atomic<size_t> loops_waiting_{0};            // loops_.size(), read without the mutex
  std::vector<std::unique_ptr<Worker>> workers_;  // running pool threads
  std::atomic<int> size_;

  static std::atomic<Pool*> current_;
};

std::atomic<Pool*> Pool::current_{new Pool(default_threads())};

}  // namespace

int available_threads() {
  if (t_in_pool_thread) return 1;
  const int size = Pool::instance().size();
  return t_thread_limit > 0 ? std::min(size, t_thread_limit) : size;
}

void parallel_for_ranges(int64_t count, int64_t grain, RangeFunction body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (count < 2 * grain) {  // one range: skip the pool entirely (small tensors, tiny models)
    body(0, count);
    return;
  }
  Pool::instance().run(count, grain, body, available_threads());
}

ThreadLimit::ThreadLimit(int threads) : previous_(t_thread_limit) { t_thread_limit = threads > 0 ? threads : 0; }
ThreadLimit::~ThreadLimit() { t_thread_limit = previous_; }

}  // namespace coremlrt::ops

namespace coremlrt {

void set_num_threads(int threads) {
  ops::Pool::instance().resize(threads > 0 ? std::min(threads, 1024) : ops::default_threads());
}

int num_threads() { return ops::Pool::instance().size(); }

}  // namespace coremlrt
