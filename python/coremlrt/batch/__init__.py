"""Batch prediction over a dataset on one machine: ``coremlrt.predict_dataset``.

    result = coremlrt.predict_dataset("model.mlpackage", "inputs/", output="predictions/")
    print(result.written, result.failed, result.throughput)

Records (see batch/records.py for the dataset forms) are predicted on a pool of threads:
``predict`` releases the GIL while the engine computes and each call takes its own execution
context from the model's pool, so N threads keep N cores busy on one loaded model. Outputs
are written as they come, in shards (batch/output.py); a record that fails is reported with
its index and error and the run goes on, unless ``fail_fast``.
"""

import concurrent.futures
import copy
import os
import sys
import time

from .output import ShardWriter, read_errors, read_outputs  # noqa: F401 - part of this module's API
from .records import open_records
from ..model import ComputeUnit, Error, MLModel


class BatchResult:
    """What a batch run did: counts, time, failures and (without an output folder) outputs."""

    def __init__(self):
        self.written = 0      # records predicted (and written, with an output folder) in this run
        self.failed = 0       # records that failed in this run
        self.skipped = 0      # records a resumed run found already written
        self.seconds = 0.0
        self.errors = []      # (index, source, message) per failed record
        self.outputs = None   # without an output folder: {index: outputs} of the good records

    @property
    def throughput(self):
        """Records per second over the records this run attempted."""
        return (self.written + self.failed) / self.seconds if self.seconds > 0 else 0.0

    def __repr__(self):
        return (f"BatchResult(written={self.written}, failed={self.failed}, skipped={self.skipped}, "
                f"seconds={self.seconds:.2f}, throughput={self.throughput:.1f}/s)")


def default_threads():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def reject_states(model):
    """Batch paths run records independently and in any order: a stateful model cannot."""
    states = model._function["states"]
    if states:
        names = ", ".join(s["name"] for s in states)
        raise Error(f"{model.package_path}: function '{model.function_name}' declares states ({names}); "
                    f"batch prediction runs records independently and in parallel, so a stateful "
                    f"sequence must run in one process with predict(..., state=...) in order")


def as_model(model, function_name=None, compute_units=None):
    if isinstance(model, MLModel):
        if function_name is not None and function_name != model.function_name:
            raise Error(f"function_name {function_name!r} given with a model loaded for "
                        f"function {model.function_name!r}")
        return model
    from ..model import cached_model

    return cached_model(model, compute_units or ComputeUnit.ALL, function_name)


def for_parallel_predictions(model, predictions_at_once, threads=None):
    """``model`` (an :class:`MLModel`) loaded to run ``predictions_at_once`` predictions side by
    side, on ``threads`` threads in all (None: as the model was loaded, by default every core).

    A model loaded for one prediction at a time gives each prediction every thread, and the
    OpenVINO backend queues predictions that arrive together (include/coremlrt/model.h,
    LoadOptions::concurrent_predictions); a batch run's threads or a worker's task slots then
    wait for each other. The same model is loaded again (once per process: coremlrt.model_cache)
    with the concurrency the caller will use. A model given as bytes, or already loaded so,
    is returned as it is."""
    options = model._options
    wanted = copy.copy(options)
    wanted.concurrent_predictions = max(predictions_at_once, 1)
    if threads is not None and options.threads == 0:  # 0: every core, as no threads were asked for
        wanted.threads = threads
    if wanted == options or model.package_path.startswith("coremlrt-memory:") or options.backend == "reference":
        return model
    from ..model import cached_model_for

    return cached_model_for(model.package_path, model.compute_unit, wanted)


def _error_message(exc):
    return str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"


def _predict_record(model, index, source, load):
    try:
        return index, source, model.predict(load()), None
    except Exception as exc:  # noqa: BLE001 - any failure belongs to this record alone
        return index, source, None, _error_message(exc)


def _progress_bar(total, enabled, initial):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="rec", dynamic_ncols=True, file=sys.stderr,
                smoothing=0.1)


def predict_dataset(model, data, output=None, *, threads=None, fail_fast=False, resume=False,
                    output_format=None, records_per_shard=256, progress=True, function_name=None,
                    compute_units=None):
    """Predicts every record of ``data`` and returns a :class:`BatchResult`.

    ``model``: an :class:`MLModel` or a model path (loaded once per process and kept).
    ``data``: a folder of ``.npz``/``.npy`` files, a Parquet file or folder, or an iterable
    of input dicts. ``output``: a folder for the prediction shards and ``_errors.jsonl``
    (``output_format`` ``"npz"`` or ``"parquet"``; by default Parquet when the folder's name
    ends in ``.parquet``, else npz); without it the outputs come back in ``result.outputs``.
    ``threads``: predictions at once (default: the cores this process may use).
    ``fail_fast``: stop at the first failed record (after writing what finished) and raise
    :class:`coremlrt.Error` naming it. ``resume``: continue a run into the same folder,
    predicting only the records its shards do not hold yet.
    """
    model = as_model(model, function_name, compute_units)
    reject_states(model)
    threads = int(threads or default_threads())
    if threads < 1:
        raise Error(f"threads must be at least 1, got {threads}")
    model = for_parallel_predictions(model, threads)
    records, total = open_records(data, model._inputs)
    writer = None
    if output is not None:
        output = os.fspath(output)
        fmt = output_format or ("parquet" if output.rstrip("/").endswith(".parquet") else "npz")
        writer = ShardWriter(output, fmt, resume=resume, records_per_shard=records_per_shard)
    elif resume:
        raise Error("resume needs an output folder to resume into")
    done = writer.done if writer is not None else set()

    result = BatchResult()
    result.skipped = len(done)
    if writer is None:
        result.outputs = {}
    bar = _progress_bar(total, progress, len(done))
    first_failure = None
    start = time.perf_counter()

    def settle(future):
        nonlocal first_failure
        index, source, outputs, message = future.result()
        if message is None:
            result.written += 1
            if writer is not None:
                writer.add(index, outputs)
            else:
                result.outputs[index] = outputs
        else:
            result.failed += 1
            result.errors.append((index, source, message))
            if writer is not None:
                writer.add_error(index, source, message)
            if fail_fast and first_failure is None:
                first_failure = (index, source, message)
        if bar is not None:
            bar.update(1)
            if result.failed:
                bar.set_postfix(failed=result.failed, refresh=False)

    # A bounded window of records in flight: the dataset is read as the predictions go,
    # never all at once.
    window = threads * 4
    try:
        with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="coremlrt-batch") as pool:
            pending = set()
            try:
                for index, source, load in records:
                    if first_failure is not None:
                        break
                    if index in done:
                        continue
                    pending.add(pool.submit(_predict_record, model, index, source, load))
                    if len(pending) >= window:
                        finished, pending = concurrent.futures.wait(
                            pending, return_when=concurrent.futures.FIRST_COMPLETED)
                        for future in finished:
                            settle(future)
            finally:
                # Records already predicting finish and are kept, also on an interrupt.
                for future in concurrent.futures.as_completed(pending):
                    settle(future)
    finally:
        result.seconds = time.perf_counter() - start
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    if first_failure is not None:
        index, source, message = first_failure
        raise Error(f"record {index} ({source}) failed: {message}")
    return result
