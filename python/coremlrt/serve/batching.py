"""Dynamic batching of stateless requests for one function of one model.

Requests wait in a bounded queue; a request that finds it full is refused with 503 at once
(never queued unboundedly). A dispatcher hands work to ``workers`` prediction slots:

* a model whose inputs all have a flexible first dimension (a batch dimension) gets the
  queued requests merged: up to ``max_batch`` requests whose other dimensions agree are
  concatenated along axis 0, predicted once, and the outputs split back by rows;
* any other model runs one request per slot, ``workers`` side by side on the model's
  execution contexts.

Batches form from what is queued when a slot frees up, so a lone request never waits (one
that finds a slot free and nobody queued runs at once); ``max_wait_ms`` > 0 lets the first
request of a merging batch wait that long for more. A lone request of a function whose
predictions take less than ``INLINE_LIMIT_S`` (a running average) runs on the event loop's
thread itself: handing it to a worker thread and back would cost more than the prediction.
A merged prediction that fails is re-run request by request, so that one bad request (a
value the model rejects) fails alone and its neighbours get their own answers.
"""

import asyncio
import collections
import logging
import time

import numpy as np

from .errors import RequestError

logger = logging.getLogger("coremlrt.serve")

# Predictions shorter than this (a running average of the function's) run on the event loop's
# thread when they find a slot free and nothing queued: a worker thread's round trip (wake-up,
# GIL hand-off, the loop's wake-up on the result) costs 60-100 us here, more than such a
# prediction (as coremlrt.coreai.runtime's INLINE_LIMIT_S, measured in
# docs/design/coreai-runtime-standin.md). Longer ones keep the loop free for other requests.
INLINE_LIMIT_S = 250e-6
_AVERAGE_WEIGHT = 0.25  # weight of the newest prediction in the running average


def mergeable(function):
    """Whether requests for this function may be concatenated along axis 0: every input is a
    multiArray whose first dimension may vary beyond 1, and the function keeps no state."""
    if function["states"] or not function["inputs"]:
        return False
    for feature in function["inputs"]:
        ranges = feature["shape_range"]
        if feature["kind"] != "multiArray" or not ranges or ranges[0][0] > 1 or 0 <= ranges[0][1] <= 1:
            return False
        if any(lo != hi for lo, hi in ranges[1:]):  # other flexible dims: leave them to one request each
            return False
    return True


def batch_limit(function):
    highs = [f["shape_range"][0][1] for f in function["inputs"]]
    return min([h for h in highs if h > 0] or [1 << 30])


class QueueFull(RequestError):
    def __init__(self, model, depth, retry_after_s):
        super().__init__(f"model '{model}': {depth} requests are queued (the limit); retry after "
                         f"{retry_after_s} s", 503, {"Retry-After": str(retry_after_s)})


class Batcher:
    def __init__(self, name, model, executor, options, metrics):
        self.name = name
        self.model = model
        self.executor = executor
        self.max_batch = options["max_batch"]
        self.max_wait_s = options["max_wait_ms"] / 1000.0
        self.max_queue = options["max_queue"]
        self.retry_after_s = options["retry_after_s"]
        self.merge = options["merge"] and mergeable(model._function)
        self.rows_limit = batch_limit(model._function) if self.merge else 1
        self.metrics = metrics
        # The model's series, looked up once: a labels() call costs about what the tiny model's whole
        # prediction does (a profile of the gRPC path, docs/design/serving.md).
        self._batch_sizes = metrics.batch_size.labels(name)
        self._queue_depth = metrics.queue_depth.labels(name)
        self._queue = collections.deque()
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(options["workers"])
        self._task = None
        self._seconds = None  # running average of a prediction's time (_predict)
        self.on_execution = None  # called with (requests, seconds) after each prediction (statistics)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self):
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def submit(self, inputs):
        """The request's outputs, and (start, seconds) of the prediction that gave them
        (time.perf_counter: the statistics' queue and compute times)."""
        if (not self.merge or self.max_wait_s == 0) and not self._queue and not self._slots.locked():
            # A free slot and nothing waiting (nor a wait for company asked for): run at once,
            # without the hop through the dispatcher; it would take this request alone too.
            await self._slots.acquire()
            try:
                self._batch_sizes.observe(1)
                if self._seconds is not None and self._seconds < INLINE_LIMIT_S:
                    results, timing = self._predict([inputs])
                else:
                    results, timing = await asyncio.get_running_loop().run_in_executor(self.executor, self._predict,
                                                                                       [inputs])
            finally:
                self._slots.release()
                if self._queue:
                    self._wakeup.set()
            if isinstance(results[0], BaseException):
                raise results[0]
            return results[0], timing
        if len(self._queue) >= self.max_queue:
            self.metrics.rejected.labels(self.name, "queue_full").inc()
            raise QueueFull(self.name, len(self._queue), self.retry_after_s)
        future = asyncio.get_running_loop().create_future()
        self._queue.append((inputs, future))
        self._queue_depth.set(len(self._queue))
        self._wakeup.set()
        return await future

    async def _dispatch(self):
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._slots.acquire()
            if self.merge and self.max_wait_s > 0 and len(self._queue) < self.max_batch:
                deadline = time.monotonic() + self.max_wait_s
                while len(self._queue) < self.max_batch and time.monotonic() < deadline:
                    self._wakeup.clear()
                    try:
                        await asyncio.wait_for(self._wakeup.wait(), deadline - time.monotonic())
                    except asyncio.TimeoutError:
                        break
            batch = []
            try:
                batch = self._take()
                self._queue_depth.set(len(self._queue))
                if not batch:
                    self._slots.release()
                    continue
                self._batch_sizes.observe(len(batch))
                work = loop.run_in_executor(self.executor, self._predict, [inputs for inputs, _ in batch])
                work.add_done_callback(lambda done, batch=batch: self._finish(done, batch))
            except Exception as exc:  # noqa: BLE001 - a bug here must fail this batch, not stop the dispatcher
                logger.exception("batch dispatch failed")
                self._slots.release()
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)

    def _take(self):
        """The next batch: the oldest live request, and (merging) the queued ones whose
        non-batch dimensions match it, up to max_batch requests and the model's row limit."""
        while self._queue and self._queue[0][1].done():  # a client that went away
            self._queue.popleft()
        if not self._queue:
            return []
        first = self._queue.popleft()
        batch = [first]
        if not self.merge:
            return batch
        key = _trailing(first[0])
        rows = _rows(first[0])
        kept = collections.deque()
        while self._queue and len(batch) < self.max_batch:
            item = self._queue.popleft()
            if item[1].done():
                continue
            if _trailing(item[0]) == key and rows + _rows(item[0]) <= self.rows_limit:
                batch.append(item)
                rows += _rows(item[0])
            else:
                kept.append(item)
        self._queue.extendleft(reversed(kept))
        return batch

    def _finish(self, done, batch):
        self._slots.release()
        if done.cancelled():
            results = [asyncio.CancelledError()] * len(batch)
        elif done.exception() is not None:
            results = [done.exception()] * len(batch)
        else:
            results, timing = done.result()
            results = [r if isinstance(r, BaseException) else (r, timing) for r in results]
        for (_, future), result in zip(batch, results):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _predict(self, requests):
        """Runs on a worker thread (or inline: INLINE_LIMIT_S). One result (outputs or the
        exception) per request, and (start, seconds) of the prediction."""
        start = time.perf_counter()
        results = predict_requests(self.model, requests)
        elapsed = time.perf_counter() - start
        seconds = elapsed / len(requests)
        previous = self._seconds
        self._seconds = seconds if previous is None else previous + _AVERAGE_WEIGHT * (seconds - previous)
        if self.on_execution is not None:
            self.on_execution(len(requests), elapsed)
        return results, (start, elapsed)


def predict_requests(model, requests):
    """Predicts stateless requests (dicts of arrays) as one merged prediction when there are
    several (the caller checked :func:`mergeable` and that their trailing shapes agree), else
    alone. One result per request: its outputs, or the exception it raised. A merged
    prediction that fails, or whose outputs are not per row, is re-run request by request."""
    if len(requests) == 1:
        return [_guarded(model.predict, requests[0])]
    names = list(requests[0])
    merged = {name: np.concatenate([r[name] for r in requests], axis=0) for name in names}
    counts = [_rows(r) for r in requests]
    try:
        outputs = model.predict(merged)
    except Exception:  # noqa: BLE001 - find which request it was: each runs alone
        return [_guarded(model.predict, r) for r in requests]
    total = sum(counts)
    if any(not isinstance(v, np.ndarray) or v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
        # The outputs are not per row (a model that pools over the batch): no merging then.
        return [_guarded(model.predict, r) for r in requests]
    bounds = np.cumsum([0] + counts)
    return [{name: np.ascontiguousarray(v[bounds[i]:bounds[i + 1]]) for name, v in outputs.items()}
            for i in range(len(requests))]


def groups(requests, rows_limit):
    """Indices of requests that may merge (same trailing shapes, within the row limit), in order."""
    out, current, key, rows = [], [], None, 0
    for i, r in enumerate(requests):
        k, n = _trailing(r), _rows(r)
        if current and (k != key or rows + n > rows_limit):
            out.append(current)
            current, rows = [], 0
        if not current:
            key = k
        current.append(i)
        rows += n
    if current:
        out.append(current)
    return out


def _guarded(function, *args):
    try:
        return function(*args)
    except Exception as exc:  # noqa: BLE001 - handed to that request's caller
        return exc


def _rows(inputs):
    return next(iter(inputs.values())).shape[0]


def _trailing(inputs):
    return tuple((name, value.shape[1:]) for name, value in sorted(inputs.items()))
