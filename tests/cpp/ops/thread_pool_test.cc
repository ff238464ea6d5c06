// The intra-op pool (src/ops/thread_pool.h, include/coremlrt/threads.h): every index once,
// concurrent callers, nested loops, exceptions, resizing under load, per-prediction caps.
// scripts/test_sanitizers.sh runs these under ThreadSanitizer.
#include "ops/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "coremlrt/error.h"
#include "coremlrt/threads.h"
#include "ops/gemm.h"
#include "ops/strided.h"

namespace coremlrt::ops {
namespace {

// Restores the default pool size after each test.
class ThreadPool : public ::testing::Test {
 protected:
  void TearDown() override { set_num_threads(0); }
};

// Runs a loop over [0, count) and checks that every index was visited exactly once.
void expect_each_index_once(int64_t count, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(count));
  parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    ASSERT_LE(0, begin);
    ASSERT_LT(begin, end);
    ASSERT_LE(end, count);
    for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(visits[i].load(), 1) << "index " << i << " of " << count;
}

TEST_F(ThreadPool, SizeIsSettableAndDefaultsToPositive) {
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(0);
  EXPECT_GE(num_threads(), 1);
}

TEST_F(ThreadPool, VisitsEveryIndexOnce) {
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (int64_t count : {0, 1, 7, 1000, 100003}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, count " << count);
      expect_each_index_once(count, 1);
      expect_each_index_once(count, 64);
      expect_each_index_once(count, 100000);
    }
  }
}

TEST_F(ThreadPool, RunsRangesOnPoolThreads) {
  set_num_threads(2);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  // 64 ranges of 5 ms: a pool thread has plenty of time to wake up and take some.
  parallel_for(64, 1, [&](int64_t begin, int64_t end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5) * (end - begin));
    std::lock_guard<std::mutex> lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(ThreadPool, ThreadLimitKeepsLoopsOnTheCaller) {
  set_num_threads(4);
  const ThreadLimit limit(1);
  EXPECT_EQ(available_threads(), 1);
  std::atomic<bool> elsewhere{false};
  const auto caller = std::this_thread::get_id();
  parallel_for(1000, 1, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) elsewhere = true;
  });
  EXPECT_FALSE(elsewhere.load());
}

TEST_F(ThreadPool, NestedLoopsRunOnTheirThread) {
  set_num_threads(3);
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      parallel_for(100, 1, [&](int64_t b, int64_t e) { total.fetch_add(e - b, std::memory_order_relaxed); });
  });
  EXPECT_EQ(total.load(), 6400);
}

TEST_F(ThreadPool, ConcurrentCallersAllFinish) {
  // More callers than pool threads, all looping at once: each must finish (a caller runs its
  // own ranges when every pool thread is busy elsewhere).
  set_num_threads(3);
  constexpr int kCallers = 8, kLoops = 200;
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int loop = 0; loop < kLoops; ++loop) {
        const int64_t count = 1000 + 37 * c + loop;
        std::vector<int> hits(static_cast<size_t>(count), 0);
        parallel_for(count, 16, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[i];
        });
        for (int h : hits)
          if (h != 1) ++wrong;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ThreadPool, ResizingWhileLoopsRunIsSafe) {
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      while (!stop.load()) {
        std::atomic<int64_t> sum{0};
        parallel_for(5000, 10, [&](int64_t begin, int64_t end) {
          int64_t s = 0;
          for (int64_t i = begin; i < end; ++i) s += i;
          sum.fetch_add(s, std::memory_order_relaxed);
        });
        if (sum.load() != int64_t{5000} * 4999 / 2) ++wrong;
      }
    });
  }
  for (int round = 0; round < 40; ++round) set_num_threads(1 + round % 4);
  stop = true;
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ThreadPool, RethrowsTheFirstErrorAfterEveryRangeFinished) {
  set_num_threads(2);
  std::atomic<int> finished{0};
  EXPECT_THROW(parallel_for(100, 1,
                            [&](int64_t begin, int64_t end) {
                              if (begin <= 50 && 50 < end) fail("the range holding 50 failed");
                              finished.fetch_add(1);
                            }),
               Error);
  // The pool still works afterwards.
  expect_each_index_once(10000, 10);
}

// A child process forked while pool threads exist gets a fresh pool of the same size: its
// loops still use several threads and finish, and resizing works. (Not in the TSan run:
// ThreadSanitizer does not support threads started after a multithreaded fork.)
// copy_strided splits copies of 256 KiB and more along their outermost dim
// (src/ops/strided.cc): a transposed, stepped view of 1 MiB copied on four threads must equal
// the element-by-element copy.
TEST_F(ThreadPool, StridedCopiesSplitOverThreads) {
  set_num_threads(4);
  const Shape shape{16, 64, 256};
  std::vector<float> src(16 * 64 * 256 * 2);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  // out[a, b, c] = src[3 + 2a + 2048b + 32c]: no two dims merge, the outermost is stepped.
  const StridedView from{3, {2, 2048, 32}};
  std::vector<float> out(16 * 64 * 256), expected(out.size());
  copy_strided(sizeof(float), shape, src.data(), from, out.data(), contiguous_view(shape));
  size_t n = 0;
  for (int64_t a = 0; a < 16; ++a)
    for (int64_t b = 0; b < 64; ++b)
      for (int64_t c = 0; c < 256; ++c) expected[n++] = src[static_cast<size_t>(3 + a * 2 + b * 2048 + c * 32)];
  EXPECT_EQ(out, expected);
}

// gemm_each spreads small products over threads whole: each result equals that product
// computed alone.
TEST_F(ThreadPool, SmallProductsSpreadOverThreadsWhole) {
  set_num_threads(4);
  const int64_t count = 24, M = 1, N = 64, K = 256;
  std::vector<float> a(count * K), b(count * K * N), c(count * N), alone(N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 29) * 0.125f - 1.5f;
  auto products = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      gemm(M, N, K, MatrixView(a.data() + i * K, K), MatrixView(b.data() + i * K * N, N), c.data() + i * N, N, false);
  };
  gemm_each(count, M * N * K, products);
  for (int64_t i = 0; i < count; ++i) {
    ThreadLimit one(1);
    gemm(M, N, K, MatrixView(a.data() + i * K, K), MatrixView(b.data() + i * K * N, N), alone.data(), N, false);
    for (int64_t j = 0; j < N; ++j) ASSERT_EQ(c[i * N + j], alone[j]) << "product " << i << ", column " << j;
  }
}

TEST(ThreadPoolFork, ChildProcessGetsAFreshPool) {
  set_num_threads(2);
  expect_each_index_once(100000, 10);  // starts the parent's pool thread
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int64_t> sum{0};
    parallel_for(100000, 10, [&](int64_t begin, int64_t end) { sum.fetch_add(end - begin); });
    set_num_threads(3);
    parallel_for(100000, 10, [&](int64_t begin, int64_t end) { sum.fetch_add(end - begin); });
    set_num_threads(1);
    _exit(sum.load() == 200000 && num_threads() == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  set_num_threads(0);
}

}  // namespace
}  // namespace coremlrt::ops
