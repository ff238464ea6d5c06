"""Records for batch prediction: reading a dataset as (index, source, load) items.

A dataset is read lazily, in a fixed order, so that an index names the same record in every
run (``--resume`` relies on it):

* a folder of ``.npz`` files (one record each, arrays by input name) and ``.npy`` files (one
  record of a single-input model), in file-name order;
* a Parquet file, or a folder of them in file-name order, one column per input (tensor
  columns as fixed-size lists, nested or flat; columns that are not inputs are ignored), rows
  in file order;
* any iterable of dicts (Python only).

``load`` builds the record's input dict; it runs on a prediction thread, so a file that cannot
be read is a failed record like any other.
"""

import glob
import os

import numpy as np

from ..model import Error

_PARQUET_ROWS_PER_READ = 1024


def fit_to_input(value, feature):
    """Reshapes a value to the input's declared shape when only the layout differs.

    Table columns hold tensors flattened (a fixed-size list of C*H*W values) and files often
    drop a leading batch dimension of 1; either is reshaped when the element count matches.
    Anything else is left as it is, so that the model's own error names the shape it expects.
    """
    shape = [int(d) for d in feature.get("shape") or []]
    if not isinstance(value, np.ndarray) or not shape or any(d <= 0 for d in shape):
        return value
    if list(value.shape) == shape or value.size != int(np.prod(shape)):
        return value
    squeezed_value = [d for d in value.shape if d != 1]
    squeezed_input = [d for d in shape if d != 1]
    if value.ndim <= 1 or squeezed_value == squeezed_input:
        return value.reshape(shape)
    return value


def _fit_record(record, inputs):
    return {name: fit_to_input(value, inputs[name]) if name in inputs else value
            for name, value in record.items()}


def _load_npz(path, inputs):
    with np.load(path, allow_pickle=False) as npz:
        return _fit_record({name: npz[name] for name in npz.files}, inputs)


def _load_npy(path, inputs):
    (name,) = inputs
    return {name: fit_to_input(np.load(path, allow_pickle=False), inputs[name])}


def _array_files(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith((".npz", ".npy")))


def _parquet_files(path):
    if os.path.isdir(path):
        return sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))
    return [path]


def _column_rows(column, feature):
    """Per-row numpy values of one Arrow column (None where the row is null)."""
    import pyarrow as pa

    count = len(column)
    valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    kind = column.type
    if pa.types.is_fixed_size_list(kind):
        shape = []
        leaf = column
        while pa.types.is_fixed_size_list(leaf.type):
            size = leaf.type.list_size
            shape.append(size)
            # .values ignores the slice offset; cut the children this slice covers.
            leaf = leaf.values.slice(leaf.offset * size, len(leaf) * size)
        values = leaf.to_numpy(zero_copy_only=False).reshape([count] + shape)
        rows = [fit_to_input(values[i], feature) if valid[i] else None for i in range(count)]
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        rows = [fit_to_input(np.asarray(value), feature) if value is not None else None
                for value in column.to_pylist()]
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        rows = column.to_pylist()  # the model refuses these with its own words
    else:
        values = column.to_numpy(zero_copy_only=False)
        rows = [fit_to_input(np.asarray(values[i]), feature) if valid[i] else None for i in range(count)]
    return rows


def _parquet_records(path, inputs):
    import pyarrow.parquet as pq

    files = _parquet_files(path)
    if not files:
        raise Error(f"no .parquet files under {path}")
    index = 0
    for file in files:
        parquet = pq.ParquetFile(file)
        names = set(parquet.schema_arrow.names)
        missing = [name for name in inputs if name not in names]
        if missing:
            raise Error(f"{file}: no column for the model's input(s) {missing}; its columns are {sorted(names)}")
        for batch in parquet.iter_batches(batch_size=_PARQUET_ROWS_PER_READ, columns=list(inputs)):
            columns = {name: _column_rows(batch.column(name), inputs[name]) for name in inputs}
            for row in range(batch.num_rows):
                # A null cell leaves the input out: the model reports it missing.
                record = {name: rows[row] for name, rows in columns.items() if rows[row] is not None}
                yield index, f"{os.path.basename(file)} row {row}", (lambda r=record: r)
                index += 1


def _parquet_count(path):
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in _parquet_files(path))


def _is_parquet(path):
    if os.path.isdir(path):
        return not _array_files(path) and bool(_parquet_files(path))
    return path.endswith((".parquet", ".pq"))


def open_records(data, inputs):
    """(iterator of (index, source, load), record count or None) for a dataset."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not os.path.exists(path):
            raise Error(f"dataset {path} does not exist")
        if _is_parquet(path):
            return _parquet_records(path, inputs), _parquet_count(path)
        if not os.path.isdir(path):
            raise Error(f"dataset {path} is neither a folder of .npz/.npy files nor Parquet")
        files = _array_files(path)
        if not files:
            raise Error(f"dataset folder {path} holds no .npz, .npy or .parquet files")
        if any(f.endswith(".npy") for f in files) and len(inputs) != 1:
            raise Error(f"dataset folder {path} holds .npy files, which feed a model of one input; "
                        f"this model takes {sorted(inputs)}: use .npz files with one array per input")

        def file_records():
            for index, name in enumerate(files):
                full = os.path.join(path, name)
                loader = _load_npz if name.endswith(".npz") else _load_npy
                yield index, name, (lambda f=full, load=loader: load(f, inputs))
        return file_records(), len(files)

    try:
        count = len(data)
    except TypeError:
        count = None

    def python_records():
        for index, record in enumerate(data):
            def load(r=record, i=index):
                if not isinstance(r, dict):
                    raise Error(f"record {i} is a {type(r).__name__}, not a dict of input arrays")
                return r
            yield index, f"record {index}", load
    return python_records(), count
