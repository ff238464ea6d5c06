#include "runtime/context_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ir/program.h"

namespace coremlrt::runtime {
namespace {

using std::chrono::milliseconds;

// A plan with no steps is enough to exercise the pool's lifecycle.
struct EmptyPlan {
  ir::Function function;
  Plan plan;
  EmptyPlan() {
    function.name = "main";
    plan.function = &function;
  }
};

TEST(ContextPool, ReusesIdleContexts) {
  EmptyPlan p;
  ContextPool pool(p.plan, milliseconds(-1));
  ExecutionContext* first;
  {
    auto lease = pool.acquire();
    first = &*lease;
  }
  auto again = pool.acquire();
  EXPECT_EQ(&*again, first);
  EXPECT_EQ(pool.stats().contexts_created, 1u);
}

TEST(ContextPool, ResetsContextsIdleLongerThanTheLinger) {
  EmptyPlan p;
  ContextPool pool(p.plan, milliseconds(30));
  { auto lease = pool.acquire(); }
  EXPECT_EQ(pool.stats().contexts_idle, 1u);
  for (int i = 0; i < 200 && pool.stats().contexts_idle; ++i) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(pool.stats().contexts_idle, 0u);
  EXPECT_EQ(pool.stats().contexts_reset, 1u);
}

TEST(ContextPool, ConcurrentLeasesWhileTheReaperRuns) {
  EmptyPlan p;
  ContextPool pool(p.plan, milliseconds(1));
  std::atomic<int> leases{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        auto lease = pool.acquire();
        lease->slots().resize(1);
        ++leases;
        if (i % 50 == 0) std::this_thread::sleep_for(milliseconds(3));
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(leases.load(), 1200);
  EXPECT_LE(pool.stats().contexts_created, 1200u);
}

TEST(ContextPool, DestroyingThePoolStopsTheReaper) {
  EmptyPlan p;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ContextPool pool(p.plan, milliseconds(1000));
    { auto lease = pool.acquire(); }
  }  // each destructor wakes and joins a reaper that waits on a 1 s linger
  // A destructor that waited the linger out would take 20 s in all.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace coremlrt::runtime
