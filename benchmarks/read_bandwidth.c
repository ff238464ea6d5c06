/* Memory read bandwidth, as a decode step needs it: THREADS threads each sum their share of a
 * buffer of SIZE_MIB MiB (far beyond the caches); prints the best GB/s of REPEATS passes.
 * benchmarks/bench_llm.py builds and runs it in the same run as the decode it compares with.
 *     cc -O3 -march=native -pthread read_bandwidth.c -o read_bandwidth
 *     ./read_bandwidth THREADS SIZE_MIB REPEATS */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { const uint64_t* begin; size_t count; uint64_t sum; } Share;

static void* sum_share(void* arg) {
  Share* s = (Share*)arg;
  /* Eight independent sums so that the loop is bound by loads, not by one add chain. */
  uint64_t acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= s->count; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += s->begin[i + k];
  for (; i < s->count; ++i) acc[0] += s->begin[i];
  uint64_t total = 0;
  for (int k = 0; k < 8; ++k) total += acc[k];
  s->sum = total;
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
  int repeats = argc > 3 ? atoi(argv[3]) : 10;
  if (threads < 1 || threads > 256 || mib < 1 || repeats < 1) return 2;
  size_t count = mib * 1024 * 1024 / sizeof(uint64_t);
  uint64_t* data = malloc(count * sizeof(uint64_t));
  if (!data) return 3;
  memset(data, 1, count * sizeof(uint64_t));
  pthread_t ids[256];
  Share shares[256];
  double best = 1e30;
  uint64_t check = 0;
  for (int r = 0; r < repeats; ++r) {
    double start = now();
    for (int t = 0; t < threads; ++t) {
      size_t first = count * t / threads, last = count * (t + 1) / threads;
      shares[t] = (Share){data + first, last - first, 0};
      pthread_create(&ids[t], NULL, sum_share, &shares[t]);
    }
    for (int t = 0; t < threads; ++t) {
      pthread_join(ids[t], NULL);
      check += shares[t].sum;
    }
    double elapsed = now() - start;
    if (elapsed < best) best = elapsed;
  }
  printf("%.3f\n", count * sizeof(uint64_t) / best / 1e9);
  fprintf(stderr, "checksum %llu\n", (unsigned long long)check);
  free(data);
  return 0;
}
