"""The `paper` and `sparse` workloads of docs/workloads.md (the paper's §IV-B, §IV-F); same seed, same arrays."""

from __future__ import annotations

from functools import partial

import numpy as np

from bluedove.core.space import Dimension, Space
from bluedove.lab.workloads import Workload

# the paper's §IV-B: four dimensions of length 1000, predicate ranges of 250, sigma 250.
SPACE_MAX = 1000.0
MAX_DIMS = 4
PAPER_WIDTH = 250.0
PAPER_SUBS = 40_000
SPARSE_WIDTH = 60.0
SPARSE_SUBS = 100_000
SPARSE_PER_QUEUE = 10


def hot_spot(i: int) -> float:
    """Mean of dimension i's centres: the hot spots spread evenly along the range (the paper's §IV-B)."""
    return 125.0 + 250.0 * i


def cropped_normal(rng: np.random.Generator, n: int, mean: float, sigma: float,
                   lo: float = 0.0, hi: float = SPACE_MAX) -> np.ndarray:
    """n draws of N(mean, sigma), each redrawn until lo <= value < hi (the paper's "cropped normal")."""
    out = rng.normal(mean, sigma, n)
    bad = np.nonzero((out < lo) | (out >= hi))[0]
    while len(bad):
        out[bad] = rng.normal(mean, sigma, len(bad))
        bad = bad[(out[bad] < lo) | (out[bad] >= hi)]
    return out


def _space(k: int) -> Space:
    return Space(tuple(Dimension(f"x{i}", 0.0, SPACE_MAX) for i in range(k)))


def _boxes(rng: np.random.Generator, n: int, k: int, sigma: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Subscriptions [low, low + width) per dimension, low = min(max(c - width/2, 0), max - width)."""
    lows = np.empty((n, k))
    for i in range(k):  # dimension by dimension, so a seed gives the same dim-i column for any k
        c = cropped_normal(rng, n, hot_spot(i), sigma)
        lows[:, i] = np.minimum(np.maximum(c - width / 2, 0.0), SPACE_MAX - width)
    return lows, lows + width


def _sample(n: int, rng: np.random.Generator, k: int, adverse: int, sigma: float) -> np.ndarray:
    """Messages: uniform in [0, 1000) per dimension; the first `adverse` follow the subscriptions'
    cropped normal instead (the paper's §IV-F, "adversely skewed messages")."""
    pts = rng.uniform(0.0, SPACE_MAX, (n, k))
    for i in range(min(adverse, k)):
        pts[:, i] = cropped_normal(rng, n, hot_spot(i), sigma)
    return pts


def _check(sigma: float, adverse: int, dims: int, n_subs: int) -> None:
    if not 1 <= dims <= MAX_DIMS:
        raise ValueError(f"dims: expected 1..{MAX_DIMS}, got {dims}")
    if not 0 <= adverse <= dims:
        raise ValueError(f"adverse: expected 0..dims ({dims}), got {adverse}")
    if not sigma > 0:
        raise ValueError(f"sigma: expected a positive number, got {sigma}")
    if n_subs < 0:
        raise ValueError(f"n_subs: expected >= 0, got {n_subs}")


def paper(seed: int = 1, sigma: float = 250.0, adverse: int = 0, dims: int = MAX_DIMS,
          n_subs: int = PAPER_SUBS) -> Workload:
    """the paper's §IV-B: one queue per subscription; `dims=k` keeps the first k dimensions only
    (the searchable ones; the space then has k dimensions)."""
    _check(sigma, adverse, dims, n_subs)
    rng = np.random.default_rng(seed)
    lows, highs = _boxes(rng, n_subs, dims, sigma, PAPER_WIDTH)
    name = _name("paper", sigma, adverse, dims, n_subs, PAPER_SUBS)
    return Workload(name=name, space=_space(dims), lows=lows, highs=highs,
                    queue_of=np.arange(n_subs, dtype=np.int64), n_queues=n_subs,
                    sample=partial(_sample, k=dims, adverse=adverse, sigma=sigma))


def sparse(seed: int = 1, sigma: float = 250.0, adverse: int = 0, dims: int = MAX_DIMS,
           n_subs: int = SPARSE_SUBS) -> Workload:
    """As `paper` with width 60: about 1 match per message; 10 subscriptions per queue."""
    _check(sigma, adverse, dims, n_subs)
    rng = np.random.default_rng(seed)
    lows, highs = _boxes(rng, n_subs, dims, sigma, SPARSE_WIDTH)
    n_queues = -(-n_subs // SPARSE_PER_QUEUE)
    name = _name("sparse", sigma, adverse, dims, n_subs, SPARSE_SUBS)
    return Workload(name=name, space=_space(dims), lows=lows, highs=highs,
                    queue_of=np.arange(n_subs, dtype=np.int64) // SPARSE_PER_QUEUE, n_queues=n_queues,
                    sample=partial(_sample, k=dims, adverse=adverse, sigma=sigma))


def _name(base: str, sigma: float, adverse: int, dims: int, n_subs: int, default_subs: int) -> str:
    """`paper`, or `paper(sigma=500,adverse=2)` listing the parameters that differ from the default."""
    parts = []
    if sigma != 250.0:
        parts.append(f"sigma={sigma:g}")
    if adverse:
        parts.append(f"adverse={adverse}")
    if dims != MAX_DIMS:
        parts.append(f"dims={dims}")
    if n_subs != default_subs:
        parts.append(f"n_subs={n_subs}")
    return f"{base}({','.join(parts)})" if parts else base


WORKLOADS = {"paper": paper, "sparse": sparse}


def get(name: str, seed: int = 1, **params) -> Workload:
    """The workload called `name` ("paper" or "sparse") with its variant parameters
    (sigma, adverse, dims, n_subs); None values are left at their defaults."""
    try:
        make = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"workload: expected one of {sorted(WORKLOADS)}, got {name!r}") from None
    return make(seed=seed, **{k: v for k, v in params.items() if v is not None})
