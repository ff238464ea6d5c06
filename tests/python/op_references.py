"""Reference implementations (numpy/torch, float64) shared by the per-op tests."""

import numpy as np
import torch


def _log_sum_exp(x, axis=None, keepdims=False):
    dim = tuple(range(x.ndim)) if axis is None else axis
    return torch.logsumexp(torch.from_numpy(x), dim=dim, keepdim=keepdims).numpy()


# MIL reduction op -> reference(x, axis=..., keepdims=...)
REDUCTIONS = {
    "reduce_sum": np.sum,
    "reduce_mean": np.mean,
    "reduce_prod": np.prod,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_sum_square": lambda x, **kw: np.sum(x * x, **kw),
    "reduce_l1_norm": lambda x, **kw: np.sum(np.abs(x), **kw),
    "reduce_l2_norm": lambda x, **kw: np.sqrt(np.sum(x * x, **kw)),
    "reduce_log_sum": lambda x, **kw: np.log(np.sum(x, **kw)),
    "reduce_log_sum_exp": _log_sum_exp,
}
