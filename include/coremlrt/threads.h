#pragma once
// The intra-op thread pool of our own kernels (the "reference" backend): one pool per
// process, shared by every model, that splits large kernels (the GEMM behind conv, linear,
// matmul and attention; elementwise ops over large tensors) across its threads.
//
//   coremlrt::set_num_threads(2);   // the pool and each calling thread together use 2 threads
//
// Its size defaults to the environment variable COREMLRT_NUM_THREADS when that is a positive
// integer, else to the machine's cores. A prediction may use fewer: LoadOptions::threads caps
// the threads one prediction of that model takes from the pool. Results do not depend on the
// number of threads: work is split only where every output element is still computed by one
// thread in one fixed order. A pool thread out of work polls for more for 50 microseconds
// before it sleeps (src/ops/thread_pool.cc says why).
namespace coremlrt {

// Sets the pool's size (threads that run one kernel, the calling thread included); 1 runs
// every kernel on the calling thread; 0 or less restores the default. Safe to call at any
// time from any thread; kernels already running finish with the threads they started with.
void set_num_threads(int threads);

// The pool's current size.
int num_threads();

}  // namespace coremlrt
