"""Soak run: mixed predictions for N minutes from threads in several processes, printing each
process's RSS over time, to show that memory stays flat under long traffic.

Each worker process loads the generated test models (tests/python/fixtures.py; plus every
runnable single-step case of ../shared/corpus when present) and runs threads that loop over:
single predictions, batch predictions, a stateful decode loop (one state per thread, 5 steps,
then reset), and rejected inputs on purpose (a wrong shape, an unknown input name). Every 10 s
each process prints its RSS and the bytes glibc's malloc has handed out and not had back (heap
in use: what a leak grows, while RSS also holds what the allocator keeps); at the end the first
and last figures after warm-up (the first minute, or the first 20% of a shorter run) are
compared.

    python3 benchmarks/soak.py --minutes 30 [--processes 2] [--threads 4] [--trim]

RSS may step up under heavier contention (more threads holding their scratch at once: each
thread's malloc arena keeps its high-water mark) while the heap in use stays flat; --trim
hands that free memory back before each reading, so that a flat trimmed RSS shows nothing is
held.

Finding (fixed): with the OpenVINO backend, one-stream models predicted from 4 threads grew RSS
in steps outside both malloc's heap and Python's allocator (30 minutes with --trim: 176 ->
305 MiB, heap in use flat at 69 MiB). strace -k on the mmap calls put every new mapping in
TBB's scalable allocator, called as TBB spawned the CPU plugin's tasks from our threads: a
synchronous infer runs the model on the calling thread, inside the stream's TBB arena. One
calling thread stays flat; so do several once all but one hand their calls to the stream's
own threads (src/backends/openvino/region_kernel.cc, run_request).
"""

import argparse
import ctypes
import multiprocessing
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_in_use_mib():
    """Bytes glibc's malloc has handed out and not had back (all arenas, mmapped chunks
    included): what a leak in C++ code grows. RSS can grow without it (freed memory kept by
    the allocator, fragmentation across the threads' arenas); a leak grows both."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return float("nan")
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


def workload():
    """(name, model, inputs, function) for every model the soak predicts with."""
    import coremlrt
    from corpus import case_names, CORPUS_PRESENT, load_case, model_path, step_arrays

    names = ["fixture_add", "fixture_fuzz_predict", "fixture_multifunction/adapter_a", "fixture_multifunction/adapter_b"]
    if CORPUS_PRESENT:
        from coremlrt import _core

        for name in case_names():
            case = load_case(name)
            if case.get("states") or case["steps"] != 1:
                continue
            report = _core.inspect(model_path(name, case))
            if not report["problem"] and not any(f["unsupported"] for f in report["functions"]):
                names.append(name)
    models = []
    for name in names:
        case = load_case(name)
        models.append((name, coremlrt.MLModel(model_path(name, case), function_name=case.get("function_name")),
                       step_arrays(name, case, 0)[0]))
    stateful_case = load_case("fixture_stateful_accumulator")
    stateful = coremlrt.MLModel(model_path("fixture_stateful_accumulator", stateful_case))
    steps = [step_arrays("fixture_stateful_accumulator", stateful_case, s)[0] for s in range(stateful_case["steps"])]
    return models, stateful, steps


def trim_heap():
    """Hands the free memory glibc's malloc keeps in its arenas back to the system."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


def process_main(index, seconds, threads, queue, trim=False):
    import coremlrt

    models, stateful, steps = workload()
    counts = {"predictions": 0, "errors_on_purpose": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def thread_main(seed):
        rng = np.random.default_rng(seed)
        state = stateful.make_state()
        done = errors = 0
        while time.monotonic() < deadline:
            name, model, inputs = models[rng.integers(len(models))]
            kind = rng.integers(10)
            if kind < 5:
                model.predict(inputs)
                done += 1
            elif kind < 7:
                model.predict([inputs] * 4)
                done += 4
            elif kind < 9:
                for step in steps:
                    stateful.predict(step, state=state)
                state = stateful.make_state()
                done += len(steps)
            else:
                bad = {k: np.zeros((3,) * (v.ndim + 1), v.dtype) for k, v in inputs.items()}
                for wrong in (bad, {"no_such_input": np.zeros(1, np.float32)}):
                    try:
                        model.predict(wrong)
                    except coremlrt.Error:
                        errors += 1
        with lock:
            counts["predictions"] += done
            counts["errors_on_purpose"] += errors

    def pooled_mib():
        # Buffers the models' execution contexts hold for reuse (a context per concurrent
        # caller, freed once idle past its linger time): buffers from 256 KiB up are mapped
        # outside malloc (src/base/tensor.cc), so they show in RSS but not in the heap figure.
        return sum(m.statistics()["pooled_bytes"] for _, m, _ in models + [(None, stateful, None)]) / 2**20

    workers = [threading.Thread(target=thread_main, args=(index * 100 + t,)) for t in range(threads)]
    for w in workers:
        w.start()
    start = time.monotonic()
    while any(w.is_alive() for w in workers):
        if trim:
            trim_heap()
        queue.put((index, time.monotonic() - start, (rss_mib(), heap_in_use_mib(), pooled_mib())))
        for w in workers:
            w.join(timeout=10 / len(workers))
    queue.put((index, time.monotonic() - start, (rss_mib(), heap_in_use_mib(), pooled_mib())))
    queue.put((index, "done", counts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--trim", action="store_true",
                        help="hand free heap memory back (malloc_trim) before each RSS reading, so that RSS "
                             "shows what is held rather than what the allocator keeps")
    args = parser.parse_args()
    import fixtures

    for name in fixtures.BUILDERS:  # built once, before the processes start
        fixtures.case_dir(name)
    seconds = args.minutes * 60
    warmup = min(60.0, seconds * 0.2)
    queue = multiprocessing.get_context("spawn").Queue()
    procs = [multiprocessing.get_context("spawn").Process(target=process_main, args=(i, seconds, args.threads, queue, args.trim))
             for i in range(args.processes)]
    for p in procs:
        p.start()
    series = {i: [] for i in range(args.processes)}
    totals = {}
    print(f"{'process':>7} {'seconds':>8} {'RSS MiB':>8} {'heap in use MiB':>16} {'pooled MiB':>11}")
    while len(totals) < args.processes:
        index, when, value = queue.get()
        if when == "done":
            totals[index] = value
            continue
        series[index].append((when, value))
        print(f"{index:>7} {when:>8.0f} {value[0]:>8.1f} {value[1]:>16.1f} {value[2]:>11.1f}", flush=True)
    for p in procs:
        p.join()
    print()
    for index, points in series.items():
        after = [value for when, value in points if when >= warmup] or [points[-1][1]]
        rss = [r for r, _, _ in after]
        heap = [h for _, h, _ in after]
        pooled = [p for _, _, p in after]
        print(f"process {index}: {totals[index]['predictions']} predictions, "
              f"{totals[index]['errors_on_purpose']} errors on purpose; after warm-up: RSS "
              f"{rss[0]:.1f} -> {rss[-1]:.1f} MiB (min {min(rss):.1f}, max {max(rss):.1f}), heap in use "
              f"{heap[0]:.1f} -> {heap[-1]:.1f} MiB (min {min(heap):.1f}, max {max(heap):.1f}), pooled by contexts "
              f"{pooled[0]:.1f} -> {pooled[-1]:.1f} MiB (max {max(pooled):.1f})")

if __name__ == "__main__":
    main()
