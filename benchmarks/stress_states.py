"""Stateful stress: the tiny LM of tests/python/lm_helpers.py (a prefill and a decode function
of one package sharing a KV-cache state), instances of both functions alternating on shared
states, idle gaps past a short context linger, states made by either instance or reset with
write_state, failing predictions that must leave the state untouched, contended states (a
second prediction on a busy state must get coremlrt.Error), a thread copying the states while
predictions run and passing them to a model with other declarations (refused), and
instances dropped and reloaded. Every step is compared with the torch
module run step by step with its own buffers. Run it under ASan:

    bash scripts/asan_tree.sh && ninja -C build/asan _core coremlrt_python_files
    LD_PRELOAD="$(clang++-16 -print-file-name=libclang_rt.asan-x86_64.so) $(g++ -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 \\
        PYTHONPATH=build/asan/python python3 benchmarks/stress_states.py --minutes 2

Prints rounds, steps, wall time, mismatches and crashes (unexpected exceptions); a hard crash
ends the process (and ASan prints the report), so a clean finish is the result. Exits 1 on
any mismatch or unexpected exception.
"""

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import coremlrt  # noqa: E402
import lm_helpers as H  # noqa: E402

# fp32 compute, fp16 caches on both sides; caches to one fp16 ulp (see tests/python/states/test_states.py)
RTOL, ATOL = 1e-4, 1e-4
CACHE_RTOL, CACHE_ATOL = 1e-3, 2e-5


class Instances:
    """The current (prefill, decode) instances; a reloader replaces them now and then, while
    workers may still hold the old ones."""

    def __init__(self, path, linger):
        self.path, self.linger = path, linger
        self.lock = threading.Lock()
        self.reloads = 0
        self.reload()

    def reload(self):
        pair = (coremlrt.MLModel(self.path, function_name="prefill", context_linger=self.linger),
                coremlrt.MLModel(self.path, function_name="decode", context_linger=self.linger))
        with self.lock:
            self.pair = pair
            self.reloads += 1

    def get(self):
        with self.lock:
            return self.pair


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=3, help="worker threads, each with its own states")
    parser.add_argument("--linger", type=float, default=0.05, help="context linger period in seconds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    workdir = tempfile.mkdtemp()
    t0 = time.time()
    path, module = H.build_lm_package(workdir)
    print(f"built {path} in {time.time() - t0:.1f} s", flush=True)
    instances = Instances(path, args.linger)
    deadline = time.time() + args.minutes * 60
    counters = {"rounds": 0, "steps": 0, "mismatches": 0, "crashes": 0, "failed_as_expected": 0,
                "contended": 0, "reads": 0, "refused": 0}
    count_lock = threading.Lock()
    live_states = []  # states in use by workers, for the reader and the contender

    def count(key, n=1):
        with count_lock:
            counters[key] += n

    def check(actual, expected, what, rtol=RTOL, atol=ATOL):
        if not np.allclose(actual, expected, rtol=rtol, atol=atol):
            count("mismatches")
            print(f"MISMATCH {what}: max |diff| {np.abs(actual - expected).max():.3g}", flush=True)

    def worker(index):
        rng = random.Random(args.seed * 1000 + index)
        ref = H.TorchLM(module)
        state = instances.get()[1].make_state()
        with count_lock:
            live_states.append(state)
        try:
            while time.time() < deadline:
                prefill, decode = instances.get()
                ref.reset()
                choice = rng.random()
                if choice < 0.3:  # a new state, from either instance
                    with count_lock:
                        live_states.remove(state)
                    state = rng.choice((prefill, decode)).make_state()
                    with count_lock:
                        live_states.append(state)
                else:  # or the old one, zeroed (retried: the contender may be using it)
                    for name in H.STATE_NAMES:
                        for _ in range(1000):
                            try:
                                state.write_state(name, np.zeros(H.CACHE_SHAPE, np.float32))
                                break
                            except coremlrt.Error as exc:
                                if "while a prediction is using it" not in str(exc):
                                    raise
                                time.sleep(0.001)
                position = 0
                token = None
                while position < H.MAX_LEN:
                    prefill, decode = instances.get()
                    use_prefill = position + H.PROMPT <= H.MAX_LEN and (position == 0 or rng.random() < 0.25)
                    if use_prefill:
                        chunk = np.array([rng.randrange(H.VOCAB) for _ in range(H.PROMPT)], np.int32)
                        model = prefill
                    else:
                        chunk = np.array([token if token is not None else rng.randrange(H.VOCAB)], np.int32)
                        model = decode
                    if rng.random() < 0.05:  # a failing prediction must leave the state untouched
                        before = [state.read_state(n) for n in H.STATE_NAMES]
                        bad = chunk.copy()
                        bad[-1] = H.VOCAB + rng.randrange(1, 50)
                        try:
                            model.predict(H.lm_inputs(bad, position), state=state)
                            count("mismatches")
                            print("MISMATCH: a bad token id did not fail", flush=True)
                        except coremlrt.Error:
                            count("failed_as_expected")
                        for n, old in zip(H.STATE_NAMES, before):
                            check(state.read_state(n), old, f"state '{n}' after a failed prediction", 0, 0)
                    while True:
                        try:
                            out = model.predict(H.lm_inputs(chunk, position), state=state)["logits"]
                            break
                        except coremlrt.Error as exc:  # the contender holds the state for a moment: retry
                            if "already in use by another prediction" not in str(exc):
                                raise
                            time.sleep(0.0005)
                    expected = ref.step(chunk, position)
                    check(out, expected, f"thread {index} {'prefill' if use_prefill else 'decode'} at {position}")
                    token = int(expected[0, -1].argmax())
                    position += len(chunk)
                    count("steps")
                    if rng.random() < 0.1:
                        time.sleep(rng.uniform(0, 3 * args.linger))  # idle past the linger period
                caches = ref.caches()
                for name in H.STATE_NAMES:
                    check(state.read_state(name), caches[name], f"thread {index} final '{name}'", CACHE_RTOL, CACHE_ATOL)
                count("rounds")
                if rng.random() < 0.3:
                    junk = [bytearray(rng.randrange(1, 4096)) for _ in range(200)]
                    del junk
        except Exception:  # noqa: BLE001 - count and report anything unexpected
            count("crashes")
            traceback.print_exc()

    other = coremlrt.MLModel(H.accumulator_package(workdir, "other", {n: (1, 2, 8, 8) for n in H.STATE_NAMES}))

    def contender():
        """Pokes the workers' live states without changing them: copies them with read_state
        while predictions run (and predicts on a private copy), and passes them to a model
        whose declarations differ, which must refuse them (or find them busy) and leave them
        as they are. The workers retry when they find their state busy because of this."""
        rng = random.Random(args.seed + 77)
        while time.time() < deadline:
            with count_lock:
                states = list(live_states)
            if not states:
                time.sleep(0.01)
                continue
            state = rng.choice(states)
            try:
                values = {n: state.read_state(n) for n in H.STATE_NAMES}
                count("reads")
                decode = instances.get()[1]
                private = decode.make_state()
                for n, v in values.items():
                    private.write_state(n, v)
                decode.predict(H.lm_inputs([1], 0), state=private)
                try:
                    other.predict({"x": np.ones(1, np.float32)}, state=state)
                    count("mismatches")
                    print("MISMATCH: a state with other declarations was accepted", flush=True)
                except coremlrt.Error as exc:
                    if "the state passed" not in str(exc) and "already in use" not in str(exc):
                        raise
                    count("refused")
            except Exception:  # noqa: BLE001
                count("crashes")
                traceback.print_exc()
            time.sleep(rng.uniform(0, 0.005))

    def contention_probe():
        """A private state used from two threads at once: one of them must be refused."""
        model = instances.get()[1]
        state = model.make_state()
        stop = threading.Event()
        refused = [0]

        def spin():
            while not stop.is_set():
                try:
                    model.predict(H.lm_inputs([3], 0), state=state)
                except coremlrt.Error as exc:
                    if "already in use by another prediction" in str(exc):
                        refused[0] += 1
                    else:
                        raise

        threads = [threading.Thread(target=spin) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
        return refused[0]

    def reloader():
        while time.time() < deadline:
            time.sleep(random.uniform(0.5, 2.0))
            try:
                instances.reload()
            except Exception:  # noqa: BLE001
                count("crashes")
                traceback.print_exc()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    threads += [threading.Thread(target=contender), threading.Thread(target=reloader)]
    start = time.time()
    for t in threads:
        t.start()
    probes = 0
    while time.time() < deadline:
        try:
            counters["contended"] += contention_probe()
            probes += 1
        except Exception:  # noqa: BLE001
            count("crashes")
            traceback.print_exc()
        time.sleep(min(5.0, max(0.0, deadline - time.time())))
    for t in threads:
        t.join()
    wall = time.time() - start
    print(f"rounds {counters['rounds']} ({counters['steps']} steps, {args.threads} worker threads), "
          f"wall {wall:.1f} s, mismatches {counters['mismatches']}, crashes {counters['crashes']}; "
          f"failed predictions as expected {counters['failed_as_expected']}, state reads by another thread "
          f"{counters['reads']}, foreign states refused {counters['refused']}, refused concurrent uses {counters['contended']} in {probes} probes, "
          f"instance reloads {instances.reloads}", flush=True)
    return 1 if counters["mismatches"] or counters["crashes"] or (probes and not counters["contended"]) else 0


if __name__ == "__main__":
    sys.exit(main())
