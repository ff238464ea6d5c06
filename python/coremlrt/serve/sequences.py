"""Live stateful sequences of one model: one MLState per sequence id, as Triton's sequence
batcher keeps one per correlation id.

A request carries ``sequence_id`` (an integer, signed or unsigned 64-bit, or a string),
``sequence_start`` and ``sequence_end`` (booleans) in its parameters (tritonclient's
``infer(sequence_id=..., sequence_start=..., sequence_end=...)`` sends exactly these). An id
names a sequence by its decimal text (:func:`sequence_key`): 31337 and "31337" are one
sequence, "031337" another; 0 and "" mean "no sequence". ``start`` makes a fresh zero state (replacing a live
one of that id), a request without ``start`` continues a live sequence, ``end`` drops the
state once its prediction is done. Requests of one sequence run one at a time, in arrival
order (an asyncio lock per sequence); different sequences run side by side.

At most ``max_sequences`` live at once; one idle for ``timeout_s`` is dropped (a client that
went away must not hold memory or a slot): a reaper drops them every ``timeout_s / 4``, and a
start that finds every slot taken drops the idle ones itself, then waits for a slot to free
(an end, or an idle sequence passing the timeout) for at most one timeout, as Triton's sequence
batcher holds new sequences in a backlog. A start that still finds no slot (every sequence
used within the timeout) gets 503 with Retry-After.
"""

import asyncio
import contextlib
import time

from .errors import RequestError


def sequence_key(value):
    """The key of a ``sequence_id`` parameter, or None for "no sequence" (absent, 0, "")."""
    if value is None or isinstance(value, bool):
        if value is None:
            return None
        raise RequestError(f"sequence_id must be an integer or a string, not {value!r}")
    if isinstance(value, int):
        return None if value == 0 else str(value)
    if isinstance(value, str):
        return None if value in ("", "0") else value
    raise RequestError(f"sequence_id must be an integer or a string, not {value!r}")


class _Sequence:
    __slots__ = ("state", "lock", "last_used", "users")

    def __init__(self, state):
        self.state = state
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.users = 0  # requests holding or waiting for the lock: never evicted while > 0


class SequenceTable:
    def __init__(self, name, max_sequences, timeout_s, retry_after_s, metrics):
        self.name = name
        self.max_sequences = max_sequences
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.metrics = metrics
        self._live = {}
        self._task = None
        self.evicted = 0
        self._freed = asyncio.Event()  # set when a sequence ends or is dropped (starts waiting for a slot)

    def __len__(self):
        return len(self._live)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._reaper())

    async def stop(self):
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._live.clear()

    @contextlib.asynccontextmanager
    async def use(self, sequence_id, start, end, make_state):
        """Holds the sequence's state for one request (yields the MLState)."""
        created = False
        if start:
            if sequence_id not in self._live:
                await self._wait_for_slot()
            if sequence_id not in self._live:  # (another start of this id may have made it meanwhile)
                self._live[sequence_id] = _Sequence(make_state())
                created = True
        sequence = self._live.get(sequence_id)
        if sequence is None:
            raise RequestError(f"model '{self.name}': sequence {sequence_id!r} is not live: it was never started "
                               f"(send sequence_start=true), has ended, or was dropped after "
                               f"{self.timeout_s:g} s idle")
        sequence.users += 1
        self.metrics.live_sequences.labels(self.name).set(len(self._live))
        try:
            async with sequence.lock:
                if start and not created:  # a start arriving for a live id begins it again, from a zero state
                    sequence.state = make_state()
                yield sequence.state
                sequence.last_used = time.monotonic()
        finally:
            sequence.users -= 1
            if end and self._live.get(sequence_id) is sequence:
                del self._live[sequence_id]
                self._freed.set()
            self.metrics.live_sequences.labels(self.name).set(len(self._live))

    async def _wait_for_slot(self):
        """Returns once a slot is free. Every slot taken: the start waits for one to free (a
        sequence that ends, or an idle one passing the timeout, dropped the moment it does), for
        at most one timeout; a table still full then is one whose every sequence was in use
        within it, and the start gets 503."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._evict_idle()
            if len(self._live) < self.max_sequences:
                return
            now = time.monotonic()
            if now >= deadline:
                self.metrics.rejected.labels(self.name, "sequences_full").inc()
                raise RequestError(f"model '{self.name}': {len(self._live)} sequences are live (the limit) and "
                                   f"each was used in the last {self.timeout_s:g} s; end one or retry after "
                                   f"{self.retry_after_s} s", 503, {"Retry-After": str(self.retry_after_s)})
            idle = [s.last_used for s in self._live.values() if s.users == 0]
            wake = min(deadline, min(idle) + self.timeout_s if idle else deadline)
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), max(wake - now, 0) + 0.001)
            except asyncio.TimeoutError:
                pass

    def _evict_idle(self):
        now = time.monotonic()
        for key, sequence in list(self._live.items()):
            if sequence.users == 0 and now - sequence.last_used > self.timeout_s:
                del self._live[key]
                self.evicted += 1
                self._freed.set()
        self.metrics.live_sequences.labels(self.name).set(len(self._live))

    async def _reaper(self):
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 4))
            self._evict_idle()
