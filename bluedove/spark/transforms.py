"""The job's transforms: DataFrames in, DataFrames out, nothing collected (docs/spark.md).

Rows are subscriptions (`lows`, `highs`: one bound per dimension) and sampled messages (`ts`,
`point`). Every transform here is a Spark plan; the driver only ever sees what `skew_stats`
collects from the small results (histograms of B buckets per dimension, k·N·W series).

The load model of a fine bucket b of dimension d (the same terms as the simulator's cost
model, `bluedove sim calibrate`, our matcher's regime):

    unit[d, b] = one + searched · subs[d, b] + matches · subs[d, b] · Π_{e≠d} p_e
    load[d, b] = messages[d, b] · unit[d, b]

`subs[d, b]` is the number of subscriptions whose dimension-d range overlaps the bucket (those
a matcher's index searches for a message there), and p_e the mean fraction of subscriptions a
message passes on dimension e: a message's expected matches, taking dimensions as independent.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.ml.feature import Bucketizer
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

INF = float("inf")


def columns(df: DataFrame, array_col: str, k: int, prefix: str) -> list[Column]:
    """Columns `prefix0`…`prefix{k-1}`: the elements of an array column."""
    return [F.col(array_col).getItem(i).alias(f"{prefix}{i}") for i in range(k)]


def message_buckets(messages: DataFrame, edges: list[list[float]]) -> DataFrame:
    """(ts, b0…b{k−1}): each message's fine bucket on every dimension."""
    k = len(edges)
    wide = messages.select("ts", *columns(messages, "point", k, "v"))
    out = Bucketizer(splitsArray=[[-INF, *e[1:-1], INF] for e in edges],
                     inputCols=[f"v{i}" for i in range(k)], outputCols=[f"f{i}" for i in range(k)]).transform(wide)
    return out.select("ts", *[F.col(f"f{i}").cast("int").alias(f"b{i}") for i in range(k)])


def subscription_buckets(subs: DataFrame, edges: list[list[float]]) -> DataFrame:
    """(first0, last0, …): the first and last fine bucket each subscription's range overlaps on
    every dimension. A range [low, high) ending exactly on an edge does not reach the bucket
    starting there. Subscriptions with an empty range on some dimension match nothing: dropped."""
    k = len(edges)
    wide = subs.select(*columns(subs, "lows", k, "lo"), *columns(subs, "highs", k, "hi"))
    wide = wide.where(F.expr(" AND ".join(f"lo{i} < hi{i}" for i in range(k)) or "true"))
    splits = [[-INF, *e[1:-1], INF] for e in edges]
    names = [f"lo{i}" for i in range(k)] + [f"hi{i}" for i in range(k)]
    b = Bucketizer(splitsArray=splits + splits, inputCols=names, outputCols=[f"{n}_b" for n in names]).transform(wide)
    out = []
    for i in range(k):
        lower_edge = F.element_at(F.array(*[F.lit(float(x)) for x in edges[i]]), F.col(f"hi{i}_b").cast("int") + 1)
        last = F.when(F.col(f"hi{i}") <= lower_edge, F.col(f"hi{i}_b") - 1).otherwise(F.col(f"hi{i}_b"))
        out += [F.col(f"lo{i}_b").cast("int").alias(f"first{i}"), last.cast("int").alias(f"last{i}")]
    return b.select(*out)


def grid(spark: SparkSession, edges: list[list[float]]) -> DataFrame:
    """(dim, bucket, low, high): every fine bucket of every dimension."""
    rows = [(d, b, float(e[b]), float(e[b + 1])) for d, e in enumerate(edges) for b in range(len(e) - 1)]
    return spark.createDataFrame(rows, "dim INT, bucket INT, low DOUBLE, high DOUBLE")


def message_histogram(buckets: DataFrame, k: int) -> DataFrame:
    """(dim, bucket, messages): messages whose value on `dim` falls in the bucket."""
    long = buckets.select(F.posexplode(F.array(*[F.col(f"b{i}") for i in range(k)])).alias("dim", "bucket"))
    return long.groupBy("dim", "bucket").agg(F.count(F.lit(1)).cast("double").alias("messages"))


def uniform_message_histogram(cells: DataFrame, space: list[tuple[str, float, float]], total: float) -> DataFrame:
    """(dim, bucket, messages) for `total` messages spread uniformly: no sample was given."""
    span = F.element_at(F.array(*[F.lit(hi - lo) for _, lo, hi in space]), F.col("dim") + 1)
    return cells.select("dim", "bucket", (F.lit(total) * (F.col("high") - F.col("low")) / span).alias("messages"))


def coverage_histogram(sub_buckets: DataFrame, cells: DataFrame, k: int) -> DataFrame:
    """(dim, bucket, subscriptions): subscriptions whose range on `dim` overlaps the bucket, as a
    running sum of +1 at each first bucket and −1 after each last one."""
    parts = [sub_buckets.select(F.lit(i).alias("dim"), F.col(f"first{i}").alias("bucket"), F.lit(1).alias("delta"))
             .unionByName(sub_buckets.select(F.lit(i).alias("dim"), (F.col(f"last{i}") + 1).alias("bucket"),
                                             F.lit(-1).alias("delta")))
             for i in range(k)]
    deltas = parts[0]
    for part in parts[1:]:
        deltas = deltas.unionByName(part)
    summed = deltas.groupBy("dim", "bucket").agg(F.sum("delta").alias("delta"))
    running = Window.partitionBy("dim").orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return cells.select("dim", "bucket").join(summed, ["dim", "bucket"], "left").na.fill(0, ["delta"]) \
        .select("dim", "bucket", F.sum("delta").over(running).cast("double").alias("subscriptions"))


def pass_fraction(hist: DataFrame, n_subs: float) -> DataFrame:
    """(dim, p): the mean fraction of subscriptions a message passes on `dim`; hist has
    (dim, messages, subscriptions) per bucket."""
    return hist.groupBy("dim").agg(
        (F.sum(F.col("messages") * F.col("subscriptions")) / (F.sum("messages") * F.lit(max(n_subs, 1.0))))
        .alias("p"))


def load_model(cells: DataFrame, messages: DataFrame, coverage: DataFrame, n_subs: float,
               cost: Mapping[str, float]) -> DataFrame:
    """(dim, bucket, low, high, messages, subscriptions, matches, unit, load): the load model of
    every fine bucket (module docstring)."""
    hist = cells.join(messages, ["dim", "bucket"], "left").join(coverage, ["dim", "bucket"], "left") \
        .na.fill(0.0, ["messages", "subscriptions"])
    p = pass_fraction(hist, n_subs)
    others = p.alias("a").join(p.alias("b"), F.col("a.dim") != F.col("b.dim"), "left") \
        .groupBy(F.col("a.dim").alias("dim")).agg(F.coalesce(F.product("b.p"), F.lit(1.0)).alias("others"))
    one, searched, matches = (float(cost.get(t, 0.0)) for t in ("one", "searched", "matches"))
    return hist.join(others, "dim", "left").na.fill(1.0, ["others"]) \
        .withColumn("matches", F.col("subscriptions") * F.col("others")) \
        .withColumn("unit", F.lit(one) + F.lit(searched) * F.col("subscriptions") + F.lit(matches) * F.col("matches")) \
        .withColumn("load", F.col("messages") * F.col("unit")) \
        .drop("others")


def segment_series(buckets: DataFrame, units: DataFrame, k: int, window_s: float, t0: float) -> DataFrame:
    """(window, col, load): per time window, the load each segment's messages bring, where
    `units` is (dim, bucket, segment, unit) and col = dim·N + segment is filled by the caller's
    `segment` numbering; each message's cost is shared by its k candidates (÷ k)."""
    long = buckets.where(F.col("ts").isNotNull()).select(
        F.floor((F.col("ts") - F.lit(t0)) / F.lit(window_s)).cast("long").alias("window"),
        F.posexplode(F.array(*[F.col(f"b{i}") for i in range(k)])).alias("dim", "bucket"))
    return long.join(F.broadcast(units), ["dim", "bucket"]) \
        .groupBy("window", "col").agg((F.sum("unit") / F.lit(float(k))).alias("load"))


# -- the attributes' conditions (the choice of the partition attributes) ---------------------
def attribute_counts(subs: DataFrame, attributes: list[tuple[str, str, float, float]]) -> DataFrame:
    """One row: per attribute i, `named{i}` (subscriptions with a condition on it) and
    `domain{i}` (the sum, over those, of the fraction of its range their intervals admit), from
    the export's `named`, `attr_lows`, `attr_highs`."""
    cols = []
    for i, (_, _, lo, hi) in enumerate(attributes):
        widths = F.zip_with(F.col("attr_lows")[i], F.col("attr_highs")[i], lambda a, b: b - a)
        admitted = F.aggregate(widths, F.lit(0.0), lambda acc, w: acc + w) / F.lit(hi - lo)
        named = F.col("named")[i]
        cols += [F.sum(named.cast("long")).alias(f"named{i}"),
                 F.sum(F.when(named, admitted).otherwise(F.lit(0.0))).alias(f"domain{i}")]
    return subs.agg(*cols)


def admitted_messages(subs: DataFrame, i: int, edges: list[float], messages: list[float]) -> DataFrame:
    """One row, `admitted`: the sum, over the subscriptions with a condition on attribute i, of
    the fraction of the sampled messages their intervals on it admit, read off the message
    histogram (`messages` per bucket of `edges`; spread evenly inside a bucket)."""
    total = sum(messages) or 1.0
    cum = [0.0]
    for m in messages:
        cum.append(cum[-1] + m / total)
    e_arr, c_arr = F.array(*[F.lit(float(x)) for x in edges]), F.array(*[F.lit(float(x)) for x in cum])
    pairs = F.zip_with(F.col("attr_lows")[i], F.col("attr_highs")[i],
                       lambda a, b: F.struct(a.alias("lo"), b.alias("hi")))
    iv = subs.where(F.col("named")[i]).select(F.explode(pairs).alias("iv"))
    iv = iv.select(F.col("iv.lo").alias("lo"), F.col("iv.hi").alias("hi"))
    splits = [-INF, *edges[1:-1], INF]
    b = Bucketizer(splitsArray=[splits, splits], inputCols=["lo", "hi"], outputCols=["lo_b", "hi_b"]).transform(iv)

    def cdf(x: str) -> Column:
        k = F.col(f"{x}_b").cast("int") + 1  # element_at counts from 1
        a, z = F.element_at(e_arr, k), F.element_at(e_arr, k + 1)
        part = F.least(F.greatest((F.col(x) - a) / (z - a), F.lit(0.0)), F.lit(1.0))
        return F.element_at(c_arr, k) + (F.element_at(c_arr, k + 1) - F.element_at(c_arr, k)) * part

    return b.agg(F.coalesce(F.sum(cdf("hi") - cdf("lo")), F.lit(0.0)).alias("admitted"))
