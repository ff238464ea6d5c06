"""Where batch predictions go: a folder of shards and an errors file.

Layout of an output folder::

    part-00000.npz | part-00000.parquet   predictions of up to N records each
    _errors.jsonl                         {"index", "source", "error"} per failed record

Each shard is written to a hidden temporary name and renamed into place, so a shard that
exists is complete: a run killed at any moment loses only the predictions not yet flushed, and
``--resume`` (which reads the shards' ``index`` column) predicts exactly those again. The
errors file is appended and flushed line by line; a resumed run retries failed records, so it
starts the file afresh. Parquet readers (pyarrow, Dask, Spark) skip names that begin with ``_``
or ``.``, so a folder of Parquet shards reads as one dataset, also while a run writes it.

Shard contents, per record index:

* ``.npz``: ``index`` (int64 [n]); each output stacked as ``NAME`` ([n, *shape]) when every
  record's output has one shape and dtype, else one array per record as ``NAME/INDEX``;
* ``.parquet``: an ``index`` column; each tensor output as a fixed-size list of its flattened
  values with its shape in the field metadata (``shape``, JSON), or a list column plus a
  ``NAME.shape`` column when shapes differ; 0-d outputs (a classifier's label) as plain columns.

A classifier's ``{label: probability}`` output is stored as its probabilities in class order.
"""

import glob
import json
import os
import re
import time

import numpy as np

from ..model import Error

ERRORS_FILE = "_errors.jsonl"
_SHARD = re.compile(r"^part-(\d+)\.(npz|parquet)$")


def _as_array(value):
    if isinstance(value, dict):
        return np.asarray(list(value.values()))
    return np.asarray(value)


def _shards(folder):
    found = []
    for name in os.listdir(folder):
        match = _SHARD.match(name)
        if match:
            found.append((int(match.group(1)), match.group(2), os.path.join(folder, name)))
    return sorted(found)


def _shard_indices(path, fmt):
    if fmt == "npz":
        with np.load(path, allow_pickle=False) as npz:
            return npz["index"].tolist()
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["index"]).column("index").to_pylist()


def written_indices(folder):
    """Indices of the records whose predictions the folder's shards hold."""
    done = set()
    for _, fmt, path in _shards(folder):
        done.update(_shard_indices(path, fmt))
    return done


def read_outputs(folder):
    """``{index: {output name: array}}`` for every record the folder's shards hold."""
    result = {}
    for _, fmt, path in _shards(folder):
        if fmt == "npz":
            with np.load(path, allow_pickle=False) as npz:
                indices = npz["index"].tolist()
                for key in npz.files:
                    if key == "index":
                        continue
                    name, _, index = key.rpartition("/")
                    if name and index.isdigit():
                        result.setdefault(int(index), {})[name] = npz[key]
                    else:
                        for row, value in zip(indices, npz[key]):
                            result.setdefault(row, {})[key] = value
            continue
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        indices = table.column("index").to_pylist()
        for field in table.schema:
            if field.name == "index" or field.name.endswith(".shape"):
                continue
            column = table.column(field.name).combine_chunks()
            metadata = field.metadata or {}
            if b"shape" in metadata:
                shape = json.loads(metadata[b"shape"])
                values = column.values.to_numpy(zero_copy_only=False).reshape([len(indices)] + shape)
            elif field.name + ".shape" in table.column_names:
                shapes = table.column(field.name + ".shape").to_pylist()
                values = [np.asarray(v).reshape(s) for v, s in zip(column.to_pylist(), shapes)]
            else:
                values = [np.asarray(v) for v in column.to_pylist()]
            for row, value in zip(indices, values):
                result.setdefault(row, {})[field.name] = value
    return result


def read_errors(folder):
    """The failed records of the latest run: a list of {"index", "source", "error"}."""
    path = os.path.join(folder, ERRORS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


def _write_npz(path, indices, outputs):
    arrays = {"index": np.asarray(indices, dtype=np.int64)}
    for name in outputs[0]:
        values = [_as_array(o[name]) for o in outputs]
        if all(v.shape == values[0].shape and v.dtype == values[0].dtype for v in values):
            arrays[name] = np.stack(values)
        else:
            arrays.update({f"{name}/{i}": v for i, v in zip(indices, values)})
    with open(path, "wb") as stream:
        np.savez(stream, **arrays)


def _write_parquet(path, indices, outputs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields, columns = [pa.field("index", pa.int64())], [pa.array(indices, pa.int64())]
    for name in outputs[0]:
        values = [_as_array(o[name]) for o in outputs]
        first = values[0]
        if all(v.ndim == 0 for v in values):
            column = pa.array([v.item() for v in values])
            fields.append(pa.field(name, column.type))
            columns.append(column)
        elif all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            flat = pa.array(np.stack(values).reshape(-1))
            column = pa.FixedSizeListArray.from_arrays(flat, int(first.size))
            fields.append(pa.field(name, column.type, metadata={"shape": json.dumps(list(first.shape))}))
            columns.append(column)
        else:
            column = pa.array([v.reshape(-1) for v in values])
            shapes = pa.array([list(v.shape) for v in values], pa.list_(pa.int32()))
            fields += [pa.field(name, column.type), pa.field(name + ".shape", shapes.type)]
            columns += [column, shapes]
    pq.write_table(pa.Table.from_arrays(columns, schema=pa.schema(fields)), path)


class ShardWriter:
    """Buffers predictions and writes them as shards of ``records_per_shard`` records, or
    sooner when ``flush_seconds`` have passed since the last shard (a slow model still saves
    its progress)."""

    def __init__(self, folder, fmt, *, resume, records_per_shard=256, flush_seconds=10.0):
        if fmt not in ("npz", "parquet"):
            raise Error(f"output format must be 'npz' or 'parquet', not {fmt!r}")
        if fmt == "parquet":
            import pyarrow  # noqa: F401 - fail now, with the import's own words, not at the first shard
        os.makedirs(folder, exist_ok=True)
        for leftover in glob.glob(os.path.join(folder, ".part-*.tmp")):
            os.remove(leftover)  # a shard that a killed run had not finished
        shards = _shards(folder)
        if shards and not resume:
            raise Error(f"{folder} already holds predictions ({len(shards)} shard(s)); "
                        f"resume to continue that run, or choose an empty folder")
        other = {f for _, f, _ in shards} - {fmt}
        if other:
            raise Error(f"{folder} holds .{other.pop()} shards; this run writes .{fmt}")
        self.folder, self.fmt = folder, fmt
        self.done = written_indices(folder) if resume else set()
        self._next_shard = shards[-1][0] + 1 if shards else 0
        self._records_per_shard, self._flush_seconds = records_per_shard, flush_seconds
        self._indices, self._outputs = [], []
        self._last_flush = time.monotonic()
        self._errors = open(os.path.join(folder, ERRORS_FILE), "w")

    def add(self, index, outputs):
        self._indices.append(index)
        self._outputs.append(outputs)
        if (len(self._indices) >= self._records_per_shard
                or time.monotonic() - self._last_flush >= self._flush_seconds):
            self.flush()

    def add_error(self, index, source, message):
        self._errors.write(json.dumps({"index": index, "source": source, "error": message}) + "\n")
        self._errors.flush()

    def flush(self):
        self._last_flush = time.monotonic()
        if not self._indices:
            return
        name = f"part-{self._next_shard:05d}.{self.fmt}"
        temporary = os.path.join(self.folder, f".{name}.tmp")
        (_write_npz if self.fmt == "npz" else _write_parquet)(temporary, self._indices, self._outputs)
        os.replace(temporary, os.path.join(self.folder, name))
        self._next_shard += 1
        self._indices, self._outputs = [], []

    def close(self):
        self.flush()
        self._errors.close()
