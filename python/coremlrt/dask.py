"""``coremlrt.dask.predict``: predictions mapped over the partitions of a Dask collection.

The code lives with the rest of batch prediction, in coremlrt.batch.dask; this module keeps the
name users import (``import coremlrt.dask``, docs/guide/batch.md). Needs the ``dask`` extra.
"""

from .batch.dask import predict

__all__ = ["predict"]
