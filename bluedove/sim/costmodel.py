"""The per-message matching cost model: cost = a + b·searched + c·matches, fitted by least squares."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class CostModel:
    """Seconds one matcher core spends matching one message against one subscription set.

    `a` is the fixed part (batching, grouping, the tree's root), `b` the part per subscription
    in the set searched, `c` the part per match reported. `load_s_per_sub` is what loading one
    subscription into a set costs (bulk load), used when a new matcher takes over a segment.
    `meta` records where and how the fit was made (machine, date, residuals, samples).
    """

    a: float
    b: float
    c: float
    load_s_per_sub: float = 0.0
    meta: dict = field(default_factory=dict, compare=False)

    def cost(self, searched, matches):
        """Works on scalars and numpy arrays alike; never below a tenth of `a` (a fit can dip)."""
        return np.maximum(self.a + self.b * np.asarray(searched) + self.c * np.asarray(matches), 0.1 * abs(self.a))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "CostModel":
        try:
            return cls(a=float(data["a"]), b=float(data["b"]), c=float(data["c"]),
                       load_s_per_sub=float(data.get("load_s_per_sub", 0.0)), meta=dict(data.get("meta", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"cost model: expected numbers a, b, c ({exc})") from None

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        return cls.from_json(json.loads(Path(path).read_text()))


def fit(searched: np.ndarray, matches: np.ndarray, seconds: np.ndarray, weights: np.ndarray | None = None) -> tuple[
        CostModel, dict]:
    """Least squares of seconds-per-message on [1, searched, matches] (one row per measured set).

    Rows are weighted by `weights` (e.g. messages timed) and by 1/seconds, so the fit minimises
    relative error: a cheap set counts as much as an expensive one. Returns the model and the
    residual statistics (relative RMS, worst relative error, R²).
    """
    searched, matches, seconds = (np.asarray(x, dtype=np.float64) for x in (searched, matches, seconds))
    if len(seconds) < 3:
        raise ValueError("fit: need at least 3 measurements for 3 coefficients")
    w = np.ones_like(seconds) if weights is None else np.asarray(weights, dtype=np.float64)
    w = np.sqrt(w) / seconds
    X = np.column_stack([np.ones_like(searched), searched, matches])
    coef, *_ = np.linalg.lstsq(X * w[:, None], seconds * w, rcond=None)
    pred = X @ coef
    rel = (pred - seconds) / seconds
    ss_res = float(np.sum((pred - seconds) ** 2))
    ss_tot = float(np.sum((seconds - seconds.mean()) ** 2)) or 1.0
    stats = {"rows": int(len(seconds)), "rel_rms": float(np.sqrt(np.mean(rel ** 2))),
             "rel_max": float(np.max(np.abs(rel))), "r2": 1.0 - ss_res / ss_tot}
    return CostModel(a=float(coef[0]), b=float(coef[1]), c=float(coef[2])), stats
