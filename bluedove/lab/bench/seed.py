"""`bluedove bench seed`: the Spark job's seed against equal widths, in one run.

1. A message sample of the workload (timestamps: the time of day of traffic readings, spread
   over an hour for the others) and its subscriptions are written as the product writes them
   (catalogue export Parquet, the dispatchers' JSON lines), and the real job runs on a local
   SparkSession: its wall time and its risk, placement against round robin.
2. On fresh messages (another stream of the same workload), for equal widths and for the seed:
   - balance: each matcher's load under the job's model (each message's cost shared by its k
     candidates, costs from the simulator's model), max over mean;
   - the simulator's saturation rate (adaptive forwarding, the paper's §IV-B method).
3. With `--e2e`, the saturation rate of real local clusters (`bench e2e`'s steps), one started
   on equal widths and one on the seed, on one store and the same subscriptions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bluedove.core.partition.seeds import parse_seed, seeded_table
from bluedove.core.partition.segments import equal_partition
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_cluster_flags, add_deliver_flag, add_output_flags, add_workload_flags, report
from bluedove.lab.bench.systems import run_system, workload
from bluedove.lab.sim.costmodel import Models
from bluedove.lab.sim.engine import Pool, SimConfig
from bluedove.lab.sim.layouts import Layout, set_sizes
from bluedove.lab.sim.saturation import Budget, Prepared, saturation
from bluedove.runtime.extras import require
from bluedove.store.server import RedisServer

DAY = 86400.0
MODEL = Path(__file__).resolve().parents[3] / "docs" / "sim" / "model.json"


def add_parser(sub) -> None:
    p = sub.add_parser("seed", help=BENCHES["seed"])
    add_workload_flags(p, "paper, sparse or traffic", variants=True)
    add_cluster_flags(p, matchers=4, policy=True)
    add_deliver_flag(p)
    p.add_argument("--sample", type=int, default=200_000, help="sampled messages the job reads (default 200,000)")
    p.add_argument("--eval", type=int, default=20_000, help="fresh messages the layouts are scored on (default 20,000)")
    p.add_argument("--window-s", type=float, default=None,
                   help="the job's time window (default: 900 for traffic's day, 60 otherwise)")
    p.add_argument("--buckets", type=int, default=1024)
    p.add_argument("--model", default=str(MODEL),
                   help="cost model of `bluedove sim calibrate` (default docs/sim/model.json)")
    p.add_argument("--regime", default="rtree", choices=("rtree", "per_dimension"),
                   help="cost model regime of the job and the simulator: rtree (our matcher, default) or "
                        "per_dimension (the paper's per-dimension index)")
    p.add_argument("--no-sim", action="store_true", help="skip the simulator's saturation search")
    p.add_argument("--job-only", action="store_true", help="only the job: its wall time and risk")
    p.add_argument("--e2e", action="store_true", help="also the saturation rate of real local clusters")
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--step-s", type=float, default=6.0)
    p.add_argument("--start-rate", type=float, default=1000.0)
    p.add_argument("--factor", type=float, default=1.3)
    p.add_argument("--max-steps", type=int, default=15)
    add_output_flags(p)
    p.set_defaults(func=run_seed)


def sample_times(w, points: np.ndarray) -> np.ndarray:
    """When each sampled message was accepted: traffic readings over the days by their time of
    day (rush hours make the load series rise and fall); other workloads evenly over an hour."""
    if "timestamp" in w.space.names:
        day = np.arange(len(points)) * 7 // len(points)  # a week of days
        return day * DAY + points[:, w.space.index("timestamp")]
    return np.linspace(0.0, 3600.0, len(points), endpoint=False)


def write_inputs(folder: Path, w, points: np.ndarray, ts: np.ndarray) -> tuple[Path, Path]:
    """The catalogue export (Parquet, `bluedove export catalogue`'s layout) and one dispatcher's
    sample file (JSON lines), as the job reads them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "subscriptions").mkdir(parents=True)
    pq.write_table(pa.table({"id": [str(i) for i in range(w.n_subs)], "queue": [str(q) for q in w.queue_of],
                             "lows": w.lows.tolist(), "highs": w.highs.tolist()}),
                   folder / "subscriptions" / "part-00000.parquet")
    (folder / "space.json").write_text(json.dumps(w.space.to_json()))
    (folder / "samples" / "bench").mkdir(parents=True)
    with open(folder / "samples" / "bench" / "messages-bench-0.jsonl", "w") as f:
        for t, p in zip(ts.tolist(), points.tolist()):
            f.write(f'{{"ts":{t!r},"point":{json.dumps(p)}}}\n')
    return folder / "subscriptions", folder / "samples"


def run_job(folder: Path, w, n: int, window_s: float, buckets: int, cost: dict, say) -> tuple[dict, float]:
    """The real job on a local[*] SparkSession; (seed, wall seconds of the job alone)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from bluedove.spark.job import Job, read_space
    from bluedove.spark.skew_stats import run

    spark = (SparkSession.builder.master("local[*]").appName("bluedove-bench-seed")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        job = Job(subscriptions=str(folder / "subscriptions"), space=read_space(str(folder / "space.json")),
                  matchers=n, messages=str(folder / "samples"), window_s=window_s, buckets=buckets,
                  out=str(folder / "seed.json"), cost=cost)
        t0 = time.perf_counter()
        seed = run(spark, job, say=say)
        return seed, time.perf_counter() - t0
    finally:
        spark.stop()


def model_loads(prep: Prepared) -> np.ndarray:
    """Each matcher's load under the job's model: every message's cost on each candidate, ÷ k."""
    n, k = prep.layout.n, prep.cand.shape[1]
    out = np.zeros(n)
    np.add.at(out, prep.cand.ravel(), (prep.cost / k).ravel())
    return out


def layouts(w, seed: dict, n: int) -> dict[str, Layout]:
    members = {f"m{j + 1}": "" for j in range(n)}
    out = {}
    for name, table in (("equal", equal_partition(w.space, members)),
                        ("seeded", seeded_table(w.space, members, parse_seed(seed, w.space, n)))):
        ids = tuple(members)
        out[name] = Layout("mpartition", n, table, set_sizes(table, ids, w.lows, w.highs), ids)
    return out


def run_seed(args: argparse.Namespace) -> int:
    require("spark", "bluedove bench seed")
    try:
        w = workload(args)
        if args.matchers < 1 or args.sample < 100 or args.eval < 100:
            raise ValueError("--matchers >= 1, --sample >= 100 and --eval >= 100 are needed")
    except ValueError as exc:
        print(f"bench seed: {exc}", file=sys.stderr)
        return 2

    def say(*a: object) -> None:
        print(*a, file=sys.stderr, flush=True)

    window_s = args.window_s or (900.0 if "timestamp" in w.space.names else 60.0)
    n = args.matchers
    result: dict = {"workload": w.name, "kind": "seed", "regime": args.regime, "matchers": n, "subscriptions": w.n_subs,
                    "sampled": args.sample, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "cores": mp.cpu_count(), "seed": args.seed}
    with tempfile.TemporaryDirectory(prefix="bluedove-seed-") as tmp:
        folder = Path(tmp)
        points = w.sample(args.sample, np.random.default_rng([args.seed, 11]))
        t0 = time.perf_counter()
        write_inputs(folder, w, points, sample_times(w, points))
        say(f"seed: inputs written in {time.perf_counter() - t0:.1f} s; running the job")
        from bluedove.spark.job import read_cost

        seed, job_s = run_job(folder, w, n, window_s, args.buckets, read_cost(args.model, args.regime), say)
        result["job_s"] = round(job_s, 1)
        result["risk"] = {k: seed["risk"][k] for k in ("placement", "round_robin", "gain", "capacity", "by_headroom")}
        result["boundaries"] = {d: [round(b, 6) for b in v["boundaries"]] for d, v in seed["dimensions"].items()}
        result["placement"] = seed["placement"]
        if not args.job_only:
            result.update(_score(args, w, seed, n, say))
            if args.e2e:
                result["e2e"] = _e2e(args, w, seed, folder, say)
    report(result, args.json, _print)
    return 0


def _score(args, w, seed: dict, n: int, say) -> dict:
    model = Models.load(args.model).get(args.regime)
    pool = Pool.of(w, w.sample(args.eval, np.random.default_rng([args.seed, 12])))
    out: dict = {"balance": {}, "sim_msgs_per_s": {}}
    for name, layout in layouts(w, seed, n).items():
        prep = Prepared.of(layout, model, pool)
        loads = model_loads(prep)
        out["balance"][name] = {"max_over_mean": round(float(loads.max() / loads.mean()), 3),
                                "per_matcher": [round(float(x / loads.mean()), 3) for x in loads]}
        if not args.no_sim:
            say(f"seed: simulator saturation search, {name}")
            out["sim_msgs_per_s"][name] = round(saturation(prep, SimConfig(policy=args.policy, seed=args.seed),
                                                           Budget()))
    sim = out["sim_msgs_per_s"]
    if sim:
        out["sim_seeded_over_equal"] = round(sim["seeded"] / sim["equal"], 3)
    return out


def _e2e(args, w, seed: dict, folder: Path, say) -> dict:
    """Two real clusters on one store: equal widths, then the seed (the stored table dropped
    between them; the second loads the same subscriptions from the catalogue)."""
    import redis

    from bluedove.lab.bench.e2e import batch_bodies, step, subscribe_all

    srv = RedisServer(folder / "redis").start()
    out: dict = {}
    try:
        bodies = batch_bodies(w, 40, args.batch, args.seed)
        space_file = str(folder / "space.json")
        args.partition = None
        for i, (name, s) in enumerate((("equal", None), ("seeded", seed))):
            redis.Redis.from_url(srv.url).delete("bd:table")
            run = run_system("mpartition", args, w, srv.url, folder / f"e2e-{name}", space_file, bodies,
                             subscribe=subscribe_all if i == 0 else None, step=step, say=say, partition_seed=s)
            out[name] = {"msgs_per_s": run["msgs_per_s"], "p50_ms": run["p50_ms"], "p99_ms": run["p99_ms"],
                         "reached_saturation": run["reached_saturation"]}
    finally:
        srv.stop()
    if out["equal"]["msgs_per_s"]:
        out["seeded_over_equal"] = round(out["seeded"]["msgs_per_s"] / out["equal"]["msgs_per_s"], 3)
    return out


def _print(r: dict) -> None:
    print(f"{r['workload']}: {r['subscriptions']:,} subscriptions, {r['matchers']} matchers, "
          f"{r['sampled']:,} sampled messages; job {r['job_s']} s ({r['cores']} cores)")
    risk = r["risk"]
    print(f"risk P(V > C): placement {risk['placement']:.4g}, round robin {risk['round_robin']:.4g}, "
          f"gain {risk['gain'] if risk['gain'] is None else round(risk['gain'], 3)}")
    for row in risk["by_headroom"]:
        g = row["gain"]
        print(f"  capacity mean x {1 + row['headroom']:.2f}: placement {row['placement']:.4g}, "
              f"round robin {row['round_robin']:.4g}, gain {g if g is None else round(g, 3)}")
    for name, b in r.get("balance", {}).items():
        sim = r.get("sim_msgs_per_s", {}).get(name)
        print(f"{name:7} load max/mean {b['max_over_mean']}" + (f", simulator {sim:,} msg/s" if sim else ""))
    if "e2e" in r:
        for name in ("equal", "seeded"):
            print(f"{name:7} real processes {r['e2e'][name]['msgs_per_s']:,} msg/s")
