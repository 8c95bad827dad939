"""The skew-statistics job: a partition seed from the subscriptions and a message sample.

    spark-submit bluedove/spark/skew_stats.py --subscriptions EXPORT/subscriptions --space EXPORT/space.json \
        [--messages SAMPLES] --matchers N --out seed.json

Extract reads the catalogue export (Parquet: `lows`, `highs`) and the dispatchers' message
sample (JSON lines or Parquet: `ts`, `point`); the transforms (`bluedove/spark/transforms.py`) build the
per-dimension histograms, the load model and the per-segment load series as Spark plans; only
aggregates reach the driver, where `bluedove/spark/placement.py` cuts equal-load boundaries and places
segments on matchers; load writes the seed (its schema: docs/spark.md). Runs on any master:
executors need nothing but Spark (no Python function runs on them but the covariance's rows).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make `bluedove.spark` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bluedove.spark import placement as P
from bluedove.spark import report as R
from bluedove.spark import transforms as T
from bluedove.spark.job import UNIFORM_MESSAGES, Job, job_from_args, parser

RISK_HEADROOMS = (0.1, 0.25, 0.5, 1.0)  # capacities the risk is also reported at (mean × 1 + h)
Histogram = dict[str, list[float]]  # one dimension's "messages", "subscriptions" and "load" per fine bucket
Say = Callable[[str], None]

# -- extract -------------------------------------------------------------------------------
CONDITIONS = ("named", "attr_lows", "attr_highs")  # the export's per-attribute columns (older exports lack them)


def extract_subscriptions(spark: SparkSession, path: str) -> DataFrame:
    df = spark.read.parquet(path)
    return df.select("lows", "highs", *[c for c in CONDITIONS if c in df.columns])


def extract_messages(spark: SparkSession, path: str) -> DataFrame:
    """Parquet, or JSON lines (a file, a folder of `*.jsonl`, or the sample folder itself)."""
    if path.endswith(".parquet") or (os.path.isdir(path) and any(n.endswith(".parquet") for n in os.listdir(path))):
        return spark.read.parquet(path).select(F.col("ts").cast("double"), F.col("point").cast("array<double>"))
    if os.path.isdir(path):  # the dispatchers' sample folder: one folder per dispatcher
        nested = any(os.path.isdir(os.path.join(path, n)) for n in os.listdir(path))
        path = os.path.join(path, "*", "*.jsonl") if nested else os.path.join(path, "*.jsonl")
    return spark.read.schema("ts DOUBLE, point ARRAY<DOUBLE>").json(path)


def bucket_edges(subs: DataFrame, messages: DataFrame | None, space: Sequence[tuple[str, float, float]],
                 buckets: int, kinds: Sequence[str] = ()) -> tuple[list[list[float]], list[list[int]]]:
    """Fine bucket edges per dimension and the atom buckets (a single value carrying at least
    two message quantiles' worth). Half the edges are equal-width; the rest follow the data
    (quantiles of messages and of subscription bounds), so a city's readings or a hot value
    get buckets of their own. An atom is [v, v + 10⁻⁹·range) on a number, [v, v + 1) (its one
    coordinate) on a string or boolean (`kinds`). Only quantiles come back to the driver."""
    k = len(space)
    probs = list(np.linspace(0.0, 1.0, buckets // 4 + 1)[1:-1])
    q_msgs: list[list[float]] = [[] for _ in space]
    if messages is not None:
        wide = messages.select(*T.columns(messages, "point", k, "v"))
        q_msgs = wide.approxQuantile([f"v{i}" for i in range(k)], probs, 1e-4)
    sub_probs = list(np.linspace(0.0, 1.0, buckets // 8 + 1)[1:-1])
    wide = subs.select(*T.columns(subs, "lows", k, "lo"), *T.columns(subs, "highs", k, "hi"))
    q_subs = wide.approxQuantile([f"lo{i}" for i in range(k)] + [f"hi{i}" for i in range(k)], sub_probs, 1e-4)
    edges: list[list[float]] = []
    atoms: list[list[int]] = []
    for i, (_, lo, hi) in enumerate(space):
        tiny = 1.0 if i < len(kinds) and kinds[i] in R.WHOLE else (hi - lo) * 1e-9
        values, counts = np.unique(np.asarray(q_msgs[i], dtype=np.float64), return_counts=True)
        hot = [float(v) for v, c in zip(values, counts) if c >= 2 and lo <= v < hi - tiny]
        points = set(np.linspace(lo, hi, buckets // 2 + 1).tolist())
        points |= {float(v) for v in q_msgs[i] + q_subs[i] + q_subs[k + i] if lo < v < hi}
        for v in hot:  # an atom gets the bucket [v, v + tiny) to itself
            points |= {v, v + tiny}
        e = np.array(sorted(points))
        e = e[np.concatenate([[True], np.diff(e) > 0])]
        edges.append(e.tolist())
        atoms.append([int(np.searchsorted(e, v, side="right") - 1) for v in hot])
    return edges, atoms


# -- the job -------------------------------------------------------------------------------
def _histograms(load: DataFrame, k: int) -> list[Histogram]:
    rows = load.select("dim", "bucket", "messages", "subscriptions", "load").orderBy("dim", "bucket").collect()
    out: list[Histogram] = [{"messages": [], "subscriptions": [], "load": []} for _ in range(k)]
    for r in rows:
        h = out[r["dim"]]
        h["messages"].append(float(r["messages"]))
        h["subscriptions"].append(int(r["subscriptions"]))
        h["load"].append(float(r["load"]))
    return out


def _covariance(series: DataFrame, n_cols: int) -> tuple[P.Floats, P.Floats, int]:
    """Mean and covariance of the k·N segment columns over the time windows (windows are rows,
    segments columns); zero covariance with fewer than two windows. Both on the JVM: the
    columns as one vector (`VectorAssembler`), their mean and variance (`Summarizer`) and
    correlation (`Correlation`, MLlib's RowMatrix underneath), the covariance their product. A
    `RowMatrix` built from Python needed a Python worker for the vectors (~2.6 s to start on 2
    cores): the step took 12.1 s of a 69 s `bluedove seed`, 7.2 s now (docs/spark.md)."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.stat import Correlation, Summarizer

    bounds = series.agg(F.min("window").alias("lo"), F.max("window").alias("hi")).first()
    assert bounds is not None  # an aggregate over a whole frame has one row, even over no rows
    if bounds["lo"] is None:
        return np.zeros(n_cols), np.zeros((n_cols, n_cols)), 0
    windows = int(bounds["hi"] - bounds["lo"] + 1)
    wide = series.groupBy("window").pivot("col", list(range(n_cols))).agg(F.sum("load"))
    every = series.sparkSession.range(int(bounds["lo"]), int(bounds["hi"]) + 1).withColumnRenamed("id", "window")
    names = [str(c) for c in range(n_cols)]
    wide = every.join(wide, "window", "left").na.fill(0.0, names)
    vec = VectorAssembler(inputCols=names, outputCol="v").transform(wide).select("v").cache()
    try:
        got = vec.select(Summarizer.metrics("mean", "variance").summary(F.col("v")).alias("s")).first()
        assert got is not None  # as `bounds`
        mu = np.asarray(got["s"]["mean"].toArray(), dtype=float)
        if windows < 2:
            return mu, np.zeros((n_cols, n_cols)), windows
        var = np.asarray(got["s"]["variance"].toArray(), dtype=float)
        corr_row = Correlation.corr(vec, "v").first()
        assert corr_row is not None
        sd = np.sqrt(np.maximum(var, 0.0))
        cov = np.asarray(corr_row[0].toArray(), dtype=float) * np.outer(sd, sd)
        cov[~np.isfinite(cov)] = 0.0  # a constant column: no correlation, and no covariance either
        np.fill_diagonal(cov, var)
        return mu, cov, windows
    finally:
        vec.unpersist()


def fit_shuffles(spark: SparkSession) -> None:
    """On a local master, unless `spark.sql.shuffle.partitions` was set: shuffle into as many
    partitions as there are cores. The job's shuffles carry histograms (k·B rows), and Spark's
    default of 200 partitions per shuffle made a local run half as slow again (docs/spark.md)."""
    sc = spark.sparkContext
    if (sc.master or "").startswith("local") and not sc.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, sc.defaultParallelism)))


def run(spark: SparkSession, job: Job, say: Say = print) -> dict[str, Any]:
    """Extract, transform, place; returns the seed (written to `job.out` if set)."""
    started = time.perf_counter()
    fit_shuffles(spark)
    n, names = job.matchers, [d[0] for d in job.space]
    if n < 1:
        raise ValueError(f"--matchers {n}: at least one matcher is needed")
    subs, messages, n_subs, n_msgs = _extract(spark, job, say)
    edges, atoms, m_buckets, hists = _model(spark, job, subs, messages if n_msgs else None, n_subs)
    dims, seg_of = _dimensions(job, edges, atoms, hists)
    mu, cov, windows = _segment_loads(spark, job, m_buckets, hists, seg_of, dims)
    assign, risk = _placement(job, mu, cov)
    seed: dict[str, Any] = {
        "version": 1,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "matchers": n,
        "space": job.space_json or {"dimensions": [{"name": nm, "min": lo, "max": hi} for nm, lo, hi in job.space]},
        "inputs": {"subscriptions": job.subscriptions, "subscription_count": int(n_subs),
                   "messages": job.messages, "message_count": int(n_msgs), "cost_model": dict(job.cost),
                   "cost_model_source": job.cost_source, "buckets": job.buckets, "window_s": job.window_s,
                   "windows": windows},
        "dimensions": dims,
        "placement": [{"matcher": j, "segments": {nm: int(assign[d, j]) for d, nm in enumerate(names)}}
                      for j in range(n)],
        "risk": risk,
        "attributes": attributes_report(job, subs, edges, hists, n_subs, bool(n_msgs)),
        "job_s": round(time.perf_counter() - started, 2),
    }
    if m_buckets is not None:
        m_buckets.unpersist()
    if job.out:
        write_seed(seed, job.out)
    for line in _summary(seed):
        say(line)
    say(f"seed: worst risk {seed['risk']['placement']:.3g} placed vs {seed['risk']['round_robin']:.3g} round robin; "
        f"{seed['job_s']} s" + (f"; written to {job.out}" if job.out else ""))
    return seed


def _summary(seed: dict[str, Any]) -> list[str]:
    """The seed in words: each dimension's boundaries (a string's as its prefix), the values too
    hot to split, and the attribute report."""
    out = []
    for name, d in seed["dimensions"].items():
        shown = d.get("labels") or [f"{x:.6g}" for x in d["boundaries"]]
        out.append(f"seed: {name} cut at {', '.join(shown[1:-1])}"
                   + "".join(f"; {u.get('value', u['low'])} too hot to split ({u['load_share']:.0%} of its load)"
                             for u in d["unsplittable"]))
    return out + (R.summary(seed["attributes"]) if seed.get("attributes") else [])


def _extract(spark: SparkSession, job: Job, say: Say) -> tuple[DataFrame, DataFrame | None, int, int]:
    """The subscriptions and the message sample (None without one), with their counts."""
    subs = extract_subscriptions(spark, job.subscriptions)
    messages = extract_messages(spark, job.messages) if job.messages else None
    n_subs = subs.count()
    n_msgs = messages.count() if messages is not None else 0
    say(f"seed: {n_subs} subscriptions, {n_msgs if messages is not None else 'no'} sampled messages, "
        f"{len(job.space)} dimensions, {job.matchers} matchers")
    return subs, messages, n_subs, n_msgs


def _model(spark: SparkSession, job: Job, subs: DataFrame, messages: DataFrame | None,
           n_subs: int) -> tuple[list[list[float]], list[list[int]], DataFrame | None, list[Histogram]]:
    """Bucket edges, atoms, the messages' buckets (cached; None without messages) and the load model's histograms."""
    k = len(job.space)
    edges, atoms = bucket_edges(subs, messages, job.space, job.buckets, job.kinds())
    cells = T.grid(spark, edges)
    if messages is not None:
        m_buckets = T.message_buckets(messages, edges).cache()
        m_hist = T.message_histogram(m_buckets, k)
    else:
        m_buckets, m_hist = None, T.uniform_message_histogram(cells, job.space, UNIFORM_MESSAGES)
    # The histograms are small (k·B rows) and read several times by the load model: keep them.
    sub_buckets = T.subscription_buckets(subs, edges).cache()
    m_hist, coverage = m_hist.cache(), T.coverage_histogram(sub_buckets, cells, k).cache()
    model = T.load_model(cells, m_hist, coverage, float(n_subs), job.cost).cache()
    hists = _histograms(model, k)
    for df in (sub_buckets, m_hist, coverage, model):
        df.unpersist()
    return edges, atoms, m_buckets, hists


def _dimensions(job: Job, edges: list[list[float]], atoms: list[list[int]],
                hists: list[Histogram]) -> tuple[dict[str, dict[str, Any]], list[P.Buckets]]:
    """Each dimension's equal-load cut (the seed's `dimensions`) and each fine bucket's segment."""
    n, kinds = job.matchers, job.kinds()
    dims: dict[str, dict[str, Any]] = {}
    seg_of: list[P.Buckets] = []
    for i, (name, lo, hi) in enumerate(job.space):
        cuts, shares = P.equal_load_cuts(edges[i], hists[i]["load"], n, atoms[i])
        if kinds[i] in R.WHOLE:  # whole-number coordinates: whole-number cuts, a string prefix each
            cuts = R.whole_cuts(cuts, lo, hi)
            shares = P.segment_shares(edges[i], hists[i]["load"], cuts)
        seg_of.append(P.segment_of(edges[i], cuts))
        total = sum(hists[i]["load"]) or 1.0
        dims[name] = {
            "boundaries": [lo, *cuts, hi],
            "segment_load": shares,
            "histogram": {"edges": edges[i], **hists[i]},
            "hot_spots": P.hot_spots(edges[i], hists[i]["load"]),
            "unsplittable": [{"low": edges[i][a], "high": edges[i][a + 1], "load_share": hists[i]["load"][a] / total}
                             for a in atoms[i] if hists[i]["load"][a] / total > 1.0 / n],
        }
        if kinds[i] != "number":  # the report in words: each boundary's prefix (or value)
            dims[name]["labels"] = [R.label(x, kinds[i], hi) for x in dims[name]["boundaries"]]
            for u in dims[name]["unsplittable"]:
                u["value"] = R.label(u["low"], kinds[i], hi)
    return dims, seg_of


def attributes_report(job: Job, subs: DataFrame, edges: list[list[float]], hists: list[Histogram], n_subs: int,
                sampled: bool) -> dict[str, Any] | None:
    """The seed's `attributes`: how often and how narrowly the subscriptions constrain each
    attribute, and the recommended partition (bluedove/spark/report.py); None from an export
    without the per-attribute columns."""
    if not set(CONDITIONS) <= set(subs.columns):
        return None
    attrs = job.attributes or [(name, "number", lo, hi) for name, lo, hi in job.space]
    row = T.attribute_counts(subs, attrs).first()
    assert row is not None  # an aggregate over a whole frame has one row
    dims = [d[0] for d in job.space]
    counts: dict[str, tuple[int, float, float | None]] = {}
    for i, (name, _, _, _) in enumerate(attrs):
        named, messages = int(row[f"named{i}"] or 0), None
        if sampled and name in dims and named:
            d = dims.index(name)
            got = T.admitted_messages(subs, i, edges[d], hists[d]["messages"]).first()
            messages = float(got["admitted"]) if got is not None else None
        counts[name] = (named, float(row[f"domain{i}"] or 0.0), messages)
    rows = R.attribute_rows(attrs, dims, counts, n_subs)
    return {"by_attribute": rows, "partition": dims, "recommended": R.recommend(rows, dims, job.partition_count),
            "rule": R.RULE}


def _segment_loads(spark: SparkSession, job: Job, m_buckets: DataFrame | None, hists: list[Histogram],
                   seg_of: list[P.Buckets], dims: dict[str, dict[str, Any]]) -> tuple[P.Floats, P.Floats, int]:
    """Mean and covariance of the k·N segments' loads over the time windows, and the windows' count."""
    k, n, names = len(job.space), job.matchers, [d[0] for d in job.space]
    # Risk-aware placement over the per-segment load series.
    units = spark.createDataFrame(
        [(d, b, d * n + int(seg_of[d][b]), float(u))
         for d in range(k) for b, u in enumerate(_units(hists[d]))], "dim INT, bucket INT, col INT, unit DOUBLE")
    if m_buckets is not None:
        first = m_buckets.agg(F.min("ts")).first()
        assert first is not None  # an aggregate over the whole frame has one row
        t0 = first[0]
        series = T.segment_series(m_buckets, units, k, job.window_s, float(t0 or 0.0))
        mu, cov, windows = _covariance(series, k * n)
    else:
        mu, cov, windows = np.zeros(k * n), np.zeros((k * n, k * n)), 0
    if not mu.any():  # no timestamps: the mean loads of the model, no variance
        mu = np.array([dims[nm]["segment_load"][s] * sum(hists[d]["load"]) / k
                       for d, nm in enumerate(names) for s in range(n)])
    return mu, cov, windows


def _placement(job: Job, mu: P.Floats, cov: P.Floats) -> tuple[P.Assignment, dict[str, Any]]:
    """The segments placed on the matchers, and the seed's `risk` of it beside round robin's."""
    k, n = len(job.space), job.matchers
    capacity = (1.0 + job.headroom) * float(mu.sum()) / n
    assign = P.place(mu, cov, k, n, capacity, job.z)
    rr = P.round_robin(k, n)
    p_place, p_rr = P.risks(mu, cov, assign, n, capacity), P.risks(mu, cov, rr, n, capacity)
    means, sds = P.matcher_loads(mu, cov, assign, n)
    curve = []  # the comparison at other capacities, each with the placement made for it
    for h in RISK_HEADROOMS:
        c = (1.0 + h) * float(mu.sum()) / n
        p1 = float(P.risks(mu, cov, P.place(mu, cov, k, n, c, job.z), n, c).max())
        p2 = float(P.risks(mu, cov, rr, n, c).max())
        curve.append({"headroom": h, "placement": p1, "round_robin": p2, "gain": P.gain(p1, p2)})
    return assign, {
        "placement": float(p_place.max()), "round_robin": float(p_rr.max()),
        "gain": P.gain(float(p_place.max()), float(p_rr.max())), "capacity": capacity,
        "headroom": job.headroom, "z": job.z, "by_headroom": curve,
        "per_matcher": [{"matcher": j, "mean": float(means[j]), "sd": float(sds[j]),
                         "risk": float(p_place[j]), "round_robin_risk": float(p_rr[j])} for j in range(n)],
        "method": "first-fit decreasing by effective size mu + z*sigma, then pairwise swaps; risk "
                  "P(V > C) under a normal approximation with the segments' covariance over "
                  "time windows (GEMOM's risk; placement after Xing et al., ICDE 2005)"}


def _units(hist: Histogram) -> list[float]:
    """Each bucket's cost per message (load ÷ messages; 0 where no message fell)."""
    return [ld / m if m else 0.0 for ld, m in zip(hist["load"], hist["messages"])]


# -- load ----------------------------------------------------------------------------------
def write_seed(seed: dict[str, Any], path: str) -> None:
    """Write the seed whole or not at all (a temporary file renamed over the target)."""
    tmp = f"{path}.tmp"
    import json

    with open(tmp, "w") as f:
        json.dump(seed, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# -- entry point ---------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        job = job_from_args(args)
    except (OSError, ValueError) as exc:
        print(f"skew_stats: {exc}", file=sys.stderr)
        return 2
    spark = SparkSession.builder.appName("bluedove-skew-stats").getOrCreate()
    try:
        run(spark, job)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
