"""Per-message matching cost: a linear model over features of (message, set), fitted by least squares,
scored held out."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Features of one (message, subscription set) pair, as `bluedove.lab.sim.engine.Pool` computes them:
#   one       1
#   size      subscriptions in the set
#   searched  subscriptions a per-dimension index must touch: those of the set holding the
#             message's value on the set's indexed dimension (the paper's §III-A/B), or the whole
#             set for a full replica ("each matcher needs to search through all subscriptions", §III)
#   matches   subscriptions the message matches (the same on every candidate)
#   log_size  ln(1 + size): the depth of a tree index
FEATURES = ("one", "size", "searched", "matches", "log_size")

# The two regimes the figures show side by side (docs/reproduction.md, "Cost model").
REGIMES = {
    "rtree": "our matcher: bluedove.matcher.index.SubscriptionSet (R-tree over all k dimensions, STR bulk load) "
             "+ match_batch",
    "per_dimension": "the paper's regime: a per-dimension index whose cost grows with the subscriptions overlapping "
                     "the message on the indexed dimension (bluedove.lab.sim.dimindex); full replication scans all",
}


@dataclass(frozen=True)
class CostModel:
    """Seconds one matcher core spends on one message: Σ terms[f] · feature f.

    `load_s_per_sub` is what loading one subscription into a set costs (bulk load), used when
    a new matcher takes over a segment (Fig. 9). `meta` records the fit (machine, date,
    held-out R², relative errors, the alternatives compared).
    """

    terms: dict
    regime: str = "rtree"
    load_s_per_sub: float = 0.0
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        bad = [f for f in self.terms if f not in FEATURES]
        if bad:
            raise ValueError(f"cost model: unknown features {bad}; expected some of {FEATURES}")

    def cost(self, feats: dict) -> np.ndarray:
        """Works on scalars and numpy arrays alike; never below a tenth of the constant (a fit can dip)."""
        out = 0.0
        for f, coef in self.terms.items():
            out = out + coef * np.asarray(feats[f], dtype=np.float64)
        floor = 0.1 * abs(self.terms.get("one", 0.0)) or 1e-9
        return np.maximum(out, floor)

    def describe(self) -> str:
        unit = {"one": (1e6, "us"), "size": (1e9, "ns x size"), "searched": (1e9, "ns x searched"),
                "matches": (1e9, "ns x matches"), "log_size": (1e6, "us x ln(1+size)")}
        return " + ".join(f"{v * unit[f][0]:.3g} {unit[f][1]}" for f, v in self.terms.items())

    def to_json(self) -> dict:
        return {"regime": self.regime, "terms": dict(self.terms), "load_s_per_sub": self.load_s_per_sub,
                "meta": self.meta}

    @classmethod
    def from_json(cls, data: dict) -> "CostModel":
        try:
            return cls(terms={str(k): float(v) for k, v in data["terms"].items()},
                       regime=str(data.get("regime", "rtree")),
                       load_s_per_sub=float(data.get("load_s_per_sub", 0.0)), meta=dict(data.get("meta", {})))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"cost model: expected {{'terms': {{feature: seconds}}}} ({exc})") from None


@dataclass(frozen=True)
class Models:
    """Both regimes, as `bluedove sim calibrate` writes them to one JSON file."""

    rtree: CostModel
    per_dimension: CostModel

    def get(self, regime: str) -> CostModel:
        if regime not in REGIMES:
            raise ValueError(f"regime: expected one of {tuple(REGIMES)}, got {regime!r}")
        return getattr(self, regime)

    def save(self, path: str | Path) -> None:
        data = {r: self.get(r).to_json() for r in REGIMES}
        Path(path).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Models":
        data = json.loads(Path(path).read_text())
        try:
            return cls(**{r: CostModel.from_json(data[r]) for r in REGIMES})
        except KeyError as exc:
            raise ValueError(f"{path}: expected keys {tuple(REGIMES)} (run `bluedove sim calibrate`)") from exc


def _r2(pred: np.ndarray, y: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2)) or 1.0
    return 1.0 - float(np.sum((pred - y) ** 2)) / ss_tot


def fit(feats: dict, seconds: np.ndarray, names: tuple[str, ...], test: np.ndarray | None = None,
        weights: np.ndarray | None = None) -> tuple[dict, dict]:
    """Least squares of seconds-per-message on the features `names` (one row per measured set).

    Rows flagged in `test` (held-out sets) are left out of the fit and scored apart. Rows are
    weighted by `weights` (e.g. messages timed). Returns the terms and the statistics: R² and
    relative RMS / worst relative error on the training rows and on the held-out rows.
    """
    y = np.asarray(seconds, dtype=np.float64)
    test = np.zeros(len(y), dtype=bool) if test is None else np.asarray(test, dtype=bool)
    train = ~test
    if train.sum() < len(names) + 1:
        raise ValueError(f"fit: need more than {len(names)} training rows, got {int(train.sum())}")
    X = np.column_stack([np.asarray(feats[f], dtype=np.float64) for f in names])
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=np.float64)
    sw = np.sqrt(w[train])
    coef, *_ = np.linalg.lstsq(X[train] * sw[:, None], y[train] * sw, rcond=None)
    pred = X @ coef
    stats = {"rows": int(train.sum()), "held_out_rows": int(test.sum())}
    for name, sel in (("train", train), ("test", test)):
        if sel.any():
            rel = (pred[sel] - y[sel]) / y[sel]
            stats[f"r2_{name}"] = round(_r2(pred[sel], y[sel]), 4)
            stats[f"rel_rms_{name}"] = round(float(np.sqrt(np.mean(rel ** 2))), 4)
            stats[f"rel_max_{name}"] = round(float(np.max(np.abs(rel))), 4)
    return {f: float(c) for f, c in zip(names, coef)}, stats
