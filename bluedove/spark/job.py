"""What the skew job is asked to do: its flags, its inputs' readers, its cost terms.

Imports no Spark, so `bluedove seed` builds its parser without starting a JVM; the job itself is
`bluedove/spark/skew_stats.py`.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any

# Our matcher's cost terms (seconds) as `bluedove sim calibrate` fitted them (the `rtree` regime
# of docs/sim/model.json; a test keeps the two equal). `--cost-model FILE` reads a newer fit.
DEFAULT_COST = {"one": 1.9327622394951393e-06, "searched": 2.305827734072313e-09,
                "matches": 5.001340302380068e-07}
UNIFORM_MESSAGES = 1_000_000.0  # the nominal sample size of "no sample: uniform messages"
# Coordinates of the attribute types that are not numbers (bluedove/core/attributes.py: a string
# is its first 6 bytes as a whole number, a boolean 0 or 1; a test keeps the two equal).
NUMBER = "number"
COORDINATES = {"string": float(256 ** 6), "boolean": 2.0}


@dataclass
class Job:
    """Everything one run of the skew job needs: inputs, space, matchers, parameters and cost terms."""

    subscriptions: str
    space: list[tuple[str, float, float]]  # [(name, min, max)]
    matchers: int
    out: str | None = None
    messages: str | None = None
    buckets: int = 1024
    window_s: float = 60.0
    headroom: float = 0.25
    z: float = 1.645
    cost: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_COST))
    cost_source: str = "built in (docs/sim/model.json, rtree)"
    # The space's attributes (name, type, low, high) in its order; empty: the dimensions, numbers.
    attributes: list[tuple[str, str, float, float]] = field(default_factory=list)
    space_json: dict[str, Any] | None = None  # the space as the seed echoes it (None: its dimensions)
    partition_count: int | None = None  # attributes to recommend (None: as many as the partition has)

    def kinds(self) -> list[str]:
        """Each dimension's attribute type (`number`, `string`, `boolean`)."""
        types = {a[0]: a[1] for a in self.attributes}
        return [types.get(name, NUMBER) for name, _, _ in self.space]


@dataclass
class SpaceFile:
    """A space file as the job reads it: its dimensions (the partition attributes' coordinate
    ranges), every attribute (name, type, low, high) and the space to echo in the seed."""

    dimensions: list[tuple[str, float, float]]
    attributes: list[tuple[str, str, float, float]]
    raw: dict[str, Any]


def read_space(path: str) -> list[tuple[str, float, float]]:
    """A space file's dimensions as (name, min, max) (`read_space_file`)."""
    return read_space_file(path).dimensions


def read_space_file(path: str) -> SpaceFile:
    """A space file, JSON or YAML: `{"dimensions": [{name, min, max}, …]}`, or a typed space
    (`{"attributes", "partition"}`, the form the sampler and the catalogue export write), whose
    dimensions are its partition attributes on their coordinates (a string's [0, 256**6), a
    boolean's [0, 2)). ValueError naming --space."""
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # a space file written by hand is YAML
        data = yaml.safe_load(text)
    try:
        if isinstance(data, dict) and "attributes" in data:
            return _typed_space(data)
        dims = [(str(d["name"]), float(d["min"]), float(d["max"])) for d in data["dimensions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"--space {path}: expected {{dimensions: [{{name, min, max}}, …]}} or "
                         f"{{attributes, partition}} ({exc!r})") from None
    if not dims or any(not lo < hi for _, lo, hi in dims):
        raise ValueError(f"--space {path}: every dimension needs min < max")
    attrs = [(name, NUMBER, lo, hi) for name, lo, hi in dims]
    return SpaceFile(dims, attrs, {"dimensions": [{"name": n, "min": lo, "max": hi} for n, lo, hi in dims]})


def _typed_space(data: dict[str, Any]) -> SpaceFile:
    """A typed space's attributes on their coordinates, and its partition as the dimensions."""
    attrs = []
    for a in data["attributes"]:
        kind = str(a.get("type", NUMBER))
        if kind not in COORDINATES and kind != NUMBER:
            raise ValueError(f"attribute {a.get('name')!r}: unknown type {kind!r}")
        lo, hi = (float(a["min"]), float(a["max"])) if kind == NUMBER else (0.0, COORDINATES[kind])
        if not lo < hi:
            raise ValueError(f"attribute {a.get('name')!r}: min must be below max")
        attrs.append((str(a["name"]), kind, lo, hi))
    by_name = {a[0]: a for a in attrs}
    partition = data.get("partition") or [a[0] for a in attrs]
    dims = [(str(p), by_name[p][2], by_name[p][3]) for p in partition]
    raw = {"attributes": data["attributes"], "partition": list(partition),
           "dimensions": [{"name": n, "min": lo, "max": hi} for n, lo, hi in dims]}
    return SpaceFile(dims, attrs, raw)


def read_cost(path: str, regime: str = "rtree") -> dict[str, float]:
    """A regime's terms from a `bluedove sim calibrate` model file (or a bare {"terms": …}):
    `rtree`, our matcher, or `per_dimension`, the paper's per-dimension index."""
    with open(path) as f:
        data = json.load(f)
    if regime not in data and "terms" not in data:
        raise ValueError(f"--cost-model {path}: no regime {regime!r} in it (it has {', '.join(data)})")
    terms = data.get(regime, data).get("terms")
    if not isinstance(terms, dict) or not {"one", "searched"} <= set(terms):
        raise ValueError(f"--cost-model {path}: expected the {regime} terms one, searched, matches")
    return {t: float(terms.get(t, 0.0)) for t in DEFAULT_COST}


def parser(prog: str = "skew_stats.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog,
                                description="Compute a partition seed from subscriptions and sampled messages.")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The job's flags; `required=False` where another mode of the command needs none of them
    (`bluedove seed --from FILE`), which then checks them itself."""
    p.add_argument("--subscriptions", required=required, metavar="PATH",
                   help="the catalogue export's Parquet (`bluedove export catalogue`: OUT/subscriptions)")
    p.add_argument("--space", default=None, metavar="FILE",
                   help="the space (default: space.json beside the subscriptions folder)")
    p.add_argument("--messages", default=None, metavar="PATH",
                   help="sampled messages: the dispatchers' sample folder, JSON lines or Parquet "
                        "(default: none, messages taken as uniform)")
    p.add_argument("--matchers", type=int, required=required, default=None, metavar="N",
                   help="segments per dimension")
    p.add_argument("--out", default="seed.json", metavar="FILE", help="the seed file to write (default seed.json)")
    p.add_argument("--buckets", type=int, default=1024, help="fine buckets per dimension (default 1024)")
    p.add_argument("--window-s", type=float, default=60.0, help="time window of the load series (default 60)")
    p.add_argument("--headroom", type=float, default=0.25,
                   help="capacity of a matcher above the mean load, for the risk (default 0.25)")
    p.add_argument("--z", type=float, default=1.645, help="z of the effective size mu + z*sigma (default 1.645)")
    p.add_argument("--regime", default="rtree", choices=("rtree", "per_dimension"),
                   help="with --cost-model: whose cost terms (default rtree, our matcher's)")
    p.add_argument("--cost-model", default=None, metavar="FILE",
                   help="a `bluedove sim calibrate` model file (default: the built-in fit)")
    p.add_argument("--partition-count", type=int, default=None, metavar="N",
                   help="attributes to recommend as the partition (default: as many as the space's partition has)")


def job_from_args(args: argparse.Namespace) -> Job:
    """A Job from parsed arguments; ValueError naming the flag on bad input."""
    space_path = args.space or os.path.join(os.path.dirname(os.path.normpath(args.subscriptions)), "space.json")
    if not os.path.exists(space_path):
        raise ValueError(f"--space: no space file at {space_path}; give --space FILE")
    count = args.partition_count
    for flag, v, ok in (("--matchers", args.matchers, args.matchers >= 1),
                        ("--partition-count", count, count is None or count >= 1),
                        ("--buckets", args.buckets, args.buckets >= 8),
                        ("--window-s", args.window_s, args.window_s > 0),
                        ("--headroom", args.headroom, args.headroom >= 0)):
        if not ok:
            raise ValueError(f"{flag} {v}: out of range")
    space = read_space_file(space_path)
    job = Job(subscriptions=args.subscriptions, space=space.dimensions, matchers=args.matchers, out=args.out,
              messages=args.messages, buckets=args.buckets, window_s=args.window_s, headroom=args.headroom, z=args.z,
              attributes=space.attributes, space_json=space.raw, partition_count=count)
    if args.cost_model:
        job.cost, job.cost_source = read_cost(args.cost_model, args.regime), f"{args.cost_model} ({args.regime})"
    return job


