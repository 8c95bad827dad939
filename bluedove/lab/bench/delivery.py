"""`bluedove bench delivery`: deliveries/s the matchers write and pollers drain on a local cluster,
with each process's CPU; exact on a sample or exit 1.

The store is one private redis-server, or with `--store-cluster N` a local Redis Cluster
(bluedove/lab/bench/store_nodes.py measures it node by node); `--compare-stores` runs the bench once per
store shape (bluedove/lab/bench/delivery_stores.py). The phases are measured between snapshots of
bluedove/lab/bench/delivery_probe.py."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import (
    add_cluster_flags,
    add_output_flags,
    add_phase_flags,
    add_workload_flags,
    report,
    workload_or_none,
)
from bluedove.lab.bench.delivery_probe import Probe
from bluedove.lab.bench.feeder import feeder_main
from bluedove.lab.bench.procs import FULL, PAUSED, Control, poller_main, publisher_main
from bluedove.lab.bench.stage import Stage, stage, stored_table
from bluedove.lab.bench.store_nodes import shapes_from_args, store_line
from bluedove.lab.load import POLL_MAX
from bluedove.lab.workloads import Workload
from bluedove.local.cluster import LocalCluster

GOAL_WRITE_PER_S = 50_000
GOAL_DRAIN_PER_S = 20_000
# Messages/s of the write phase the feeders prepare ahead (all feeders together): above what
# 2 cores write (~50,000 msg/s on `sparse`, ~130,000 on a small set), so that the phase never
# waits on a feeder building (~300 bytes per message: ~450 MB at PREBUILD_MAX).
PREBUILD_PER_S = 150_000
PREBUILD_MAX = 1_500_000  # a long --duration builds the rest as it goes
# Connections per poller process unless --connections says otherwise: each is one client going
# round its queues, and a fleet of phones is many. Paced, most of them wait between passes; with
# 32 per process the passes hung on the latency of each poll and ack (~100 ms once the writers
# load the machine) and fell behind the poll interval, not on the service's throughput.
POLLER_CONNECTIONS = 128


def _wait_steady(value, quiet_s: float = 0.5, timeout_s: float = 30.0) -> None:
    """Until a shared counter stops moving for `quiet_s` (the last streams have returned)."""
    deadline = time.monotonic() + timeout_s
    last = value.value
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        if value.value == last:
            return
        last = value.value


def _empty(probe: Probe, timeout_s: float, left: int = 1000) -> None:
    """Until the pollers have brought the backlog down to `left` deliveries (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and probe.backlog() > left:
        time.sleep(0.5)


def _verify(w: Workload, queues: list[tuple[str, str]], sub_ids: list[str], sample_q: list[int],
            published: list[tuple[list[str], np.ndarray]], seen: list) -> dict:
    """Brute force over the sampled queues' subscriptions: every (queue, message) expected is
    received once with exactly the matching subscriptions, and nothing else arrives there."""
    rows = np.flatnonzero(np.isin(w.queue_of, sample_q))
    lows, highs = w.lows[rows], w.highs[rows]
    expected: dict[tuple[str, str], set[str]] = {}
    for ids, pts in published:
        for start in range(0, len(ids), 2000):
            p = pts[start:start + 2000]
            hit = np.all((lows[None, :, :] <= p[:, None, :]) & (p[:, None, :] < highs[None, :, :]), axis=2)
            for mi, si in zip(*np.nonzero(hit)):
                r = rows[si]
                key = (queues[w.queue_of[r]][0], ids[start + mi])
                expected.setdefault(key, set()).add(sub_ids[r])
    got: dict[tuple[str, str], set[str]] = {}
    dups = []
    for q, mid, subs in seen:
        if (q, mid) in got:
            dups.append([q, mid])
        got[(q, mid)] = set(subs)
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    wrong = [list(k) for k in expected if k in got and got[k] != expected[k]]
    return {"sample_queues": len(sample_q), "expected": len(expected), "received": len(seen),
            "missing": len(missing), "unexpected": len(unexpected), "duplicates": len(dups),
            "wrong_subscriptions": len(wrong),
            "examples": [list(k) for k in missing[:3]] + [list(k) for k in unexpected[:3]] + dups[:3] + wrong[:3],
            "exact": not (missing or unexpected or dups or wrong)}


def _spawn(ctx, args, w: Workload, cluster: LocalCluster, queues, sample: set[str], table: dict, results):
    """The load processes (not started): API publishers P*, feeders F*, pollers Q*, and their controls."""

    def control() -> Control:
        return Control(ctx.Value("d", PAUSED), ctx.Value("q", 0), ctx.Value("i", 0), ctx.Event(), ctx.Event(),
                       ctx.Value("i", 0), ctx.Value("q", 0))

    pub, feed, poll = control(), control(), control()
    names = list(w.space.names)
    procs = {f"P{i + 1}": ctx.Process(target=publisher_main, daemon=True,
                                      args=(cluster.grpc_address, names, args.seed, i, pub, results))
             for i in range(args.publishers)}
    # Enough prepared messages for the write phase at up to PREBUILD_PER_S; the sustain phase
    # (paced) may build as it goes.
    prebuild = int(min((args.warmup + args.duration) * PREBUILD_PER_S, PREBUILD_MAX) / max(args.feeders, 1))
    procs.update({f"F{i + 1}": ctx.Process(target=feeder_main, daemon=True, args=(table, args.seed, i, feed, results),
                                           kwargs={"prebuild": prebuild})
                  for i in range(args.feeders)})
    procs.update({f"Q{i + 1}": ctx.Process(target=poller_main, daemon=True,
                                           args=(cluster.url, queues[i::args.pollers], sample, args.connections,
                                                 poll, results, args.poll_interval))
                  for i in range(args.pollers)})
    return procs, pub, feed, poll


def _measure(probe: Probe, warmup_s: float, seconds: float) -> dict:
    time.sleep(warmup_s)
    a = probe.snap()
    time.sleep(seconds)
    return probe.phase(a, probe.snap())


def _wait_ready(args: argparse.Namespace, pub: Control, feed: Control, poll: Control) -> None:
    deadline = time.monotonic() + 120
    while (pub.ready.value < args.publishers or feed.ready.value < args.feeders
           or poll.ready.value < args.pollers) and time.monotonic() < deadline:
        time.sleep(0.1)


def _paused(probe: Probe, args: argparse.Namespace, senders: Control) -> dict:
    """A phase of `senders` at full speed; then they pause and their last calls return."""
    senders.rate.value = FULL
    phase = _measure(probe, args.warmup, args.duration)
    senders.rate.value = PAUSED
    _wait_steady(senders.done)
    return phase


def _drain(probe: Probe, args: argparse.Namespace, poll: Control) -> dict:
    """Pollers only, on the backlog the write phase left; measured until 80 % of it is gone.
    With that backlog every poll finds many deliveries: the drain rate at its cheapest."""
    poll.active.value = 1
    a = probe.snap()
    deadline = time.monotonic() + args.duration * 3
    while time.monotonic() < deadline and probe.backlog() > a["backlog"] * 0.2:
        time.sleep(0.5)
    return probe.phase(a, probe.snap())


def _sustain(probe: Probe, args: argparse.Namespace, feed: Control, per_msg: float) -> list[dict]:
    """Feeders paced at a target delivery rate while the paced pollers drain, each attempt
    from an (almost) empty backlog, so that what is measured is the steady state: each poll
    finds what arrived since that queue's last poll. Three attempts, a search for the highest
    rate the machine sustains: after a sustained one the next asks 15 % more than it wrote;
    after one not sustained, a little below what was acked, or nothing more once an attempt
    was sustained (the edge lies between the two)."""
    target = args.rate
    attempts: list[dict] = []
    for _ in range(3):
        _empty(probe, args.duration * 3 + 2 * args.poll_interval)
        feed.rate.value = target / max(per_msg, 1e-9) / max(args.feeders, 1)
        # The warm-up covers a poll interval: by then the backlog has risen to its plateau.
        ph = _measure(probe, max(args.warmup * 2, args.warmup + args.poll_interval), args.duration)
        feed.rate.value = PAUSED
        _wait_steady(feed.done)
        ph["target_per_s"] = round(target)
        # Sustained: the backlog does not grow (by at most 2 % of the rate per second).
        ph["sustained"] = ph["backlog_growth_per_s"] <= 0.02 * max(ph["written_per_s"], 1)
        attempts.append(ph)
        if ph["sustained"]:
            target = 1.15 * max(ph["written_per_s"], 1)
        elif any(a["sustained"] for a in attempts):
            break
        else:
            target = 0.9 * ph["acked_per_s"]
    return attempts


def _summary(args: argparse.Namespace, w: Workload, phases: dict, attempts: list[dict], per_msg: float) -> dict:
    sustain = phases["sustain"]
    return {
        "kind": "delivery", "store": args.shape.label, "workload": w.name, "subscriptions": w.n_subs,
        "queues": w.n_queues,
        "matchers": args.matchers, "dispatchers": args.dispatchers, "publishers": args.publishers,
        "feeders": args.feeders, "pollers": args.pollers, "poller_connections": args.connections,
        "poll_max": POLL_MAX, "seed": args.seed, "cpus": os.cpu_count(),
        "poll_interval_s": args.poll_interval,
        "deliveries_per_msg": round(per_msg, 3),
        "deliveries_per_poll": sustain["deliveries_per_poll"],
        "write_per_s": phases["write"]["written_per_s"],
        "api_write_per_s": phases["publish_api"]["written_per_s"],
        "drain_per_s": sustain["acked_per_s"],
        "sustained": sustain["sustained"],
        "sustained_per_s": min(sustain["written_per_s"], sustain["acked_per_s"]) if sustain["sustained"] else 0,
        "drain_only_per_s": phases["drain"]["acked_per_s"],
        "redis_cpu_us_per_delivery": {k: phases[k]["store"]["redis_cpu_us_per_delivery"]
                                      for k in ("write", "drain", "sustain")},
        "goals": {"write_per_s": GOAL_WRITE_PER_S, "drain_per_s": GOAL_DRAIN_PER_S},
        "phases": phases, "sustain_attempts": attempts,
    }


def _run(args: argparse.Namespace, w: Workload, st: Stage) -> dict:
    cluster, queues, sub_ids = st.cluster, st.queues, st.sub_ids
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    rng = np.random.default_rng([args.seed, 3])
    sample_q = sorted(rng.choice(w.n_queues, size=min(args.sample, w.n_queues), replace=False).tolist())
    probe = None
    procs, pub, feed, poll = _spawn(ctx, args, w, cluster, queues, {queues[i][0] for i in sample_q},
                                    table := stored_table(st.store.url), results)
    for p in procs.values():
        p.start()
    try:
        _wait_ready(args, pub, feed, poll)
        pids = {**{c.name: c.pid for c in cluster.children}, **{n: p.pid for n, p in procs.items()},
                "bench": os.getpid()}
        probe = Probe(st.store, queues, pids, [pub.done, feed.done], poll)
        load_start = [round(x, 2) for x in os.getloadavg()]
        phases: dict[str, dict] = {}
        # End to end: API publishers (PublishStream) at full speed, nobody polls.
        phases["publish_api"] = _paused(probe, args, pub)
        # write: feeders send to the matchers' Forward at full speed, nobody polls; the backlog
        # grows by exactly what the matchers write.
        phases["write"] = write = _paused(probe, args, feed)
        per_msg = write["written_per_s"] / max(write["published_per_s"], 1)
        phases["drain"] = _drain(probe, args, poll)
        attempts = _sustain(probe, args, feed, per_msg)
        ok = [a for a in attempts if a["sustained"]]  # the best sustained attempt is reported
        phases["sustain"] = max(ok, key=lambda a: a["written_per_s"]) if ok else attempts[-1]
        out = {"load_avg_start": load_start, "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
        check, errors = _finish(w, queues, sub_ids, sample_q, procs, pub, feed, poll, results, probe)
        out.update(_summary(args, w, phases, attempts, per_msg))
        out.update({"verify": check, "errors": errors[:5], "exact": check["exact"]})
        # A table change during the run (a takeover when a starved matcher misses its gossip)
        # makes the feeders' table stale: their Forward calls then fail, as `errors` shows.
        out["table_epochs"] = [table["epoch"], probe.loop.run_until_complete(probe.store.get_table())["epoch"]]
        out["store_events"] = [e.get("action") for e in probe.loop.run_until_complete(probe.store.events(20))]
        return out
    finally:
        for c in (pub, feed, poll):
            c.stop.set()
        for p in procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        if probe is not None:
            probe.close()


def _finish(w, queues, sub_ids, sample_q, procs, pub, feed, poll, results, probe) -> tuple[dict, list[str]]:
    """Stop the senders, let the pollers empty every queue, collect what each saw, verify."""
    pub.stop.set()
    feed.stop.set()
    poll.active.value = 1
    poll.drain.set()
    poll.stop.set()
    got: dict = {}
    for _ in procs:
        kind, idx, payload = results.get(timeout=600)
        got[(kind, idx)] = payload
    senders = [p for (kind, _), p in got.items() if kind in ("publisher", "feeder")]
    pollers = [p for (kind, _), p in got.items() if kind == "poller"]
    errors = [p["error"] for p in senders if p["error"]] + [e for p in pollers for e in p["errors"]]
    published = [(p["ids"], p["points"]) for p in senders if p["ids"]]
    seen = [tuple(s) for p in pollers for s in p["seen"]]
    check = _verify(w, queues, sub_ids, sample_q, published, seen)
    check["backlog_after_drain"] = probe.backlog()
    check["published"] = sum(len(ids) for ids, _ in published)
    check["acked"] = sum(p["acked"] for p in pollers)
    check["feeders_built_live"] = sum(p.get("built_live", 0) for (kind, _), p in got.items() if kind == "feeder")
    check["exact"] = check["exact"] and check["backlog_after_drain"] == 0 and not errors
    return check, errors


def add_parser(sub) -> None:
    p = sub.add_parser("delivery", help=BENCHES["delivery"])
    add_workload_flags(p)
    add_output_flags(p)
    add_cluster_flags(p, matchers=2)
    p.add_argument("--feeders", type=int, default=3,
                   help="processes sending to the matchers' Forward directly, as dispatchers do (default 3)")
    p.add_argument("--pollers", type=int, default=2, help="poller processes (default 2)")
    add_phase_flags(p, POLLER_CONNECTIONS, "concurrent polls per poller process")
    p.add_argument("--poll-interval", type=float, default=10.0,
                   help="seconds a poller connection takes at least to poll each of its queues once, like phones "
                        "polling every so often (0: as fast as it can; default 10)")
    p.add_argument("--rate", type=float, default=20_000.0,
                   help="the deliveries/s publishers are paced at in the sustain phase (default 20,000)")
    p.add_argument("--sample", type=int, default=40,
                   help="queues whose deliveries are checked against brute force (default 40)")
    p.add_argument("--store-cluster", type=int, default=None, metavar="N",
                   help="run on a local Redis Cluster of N primaries (default: one redis-server)")
    p.add_argument("--store-replicas", type=int, default=1, metavar="R",
                   help="replicas of each primary with --store-cluster or --compare-stores (default 1)")
    p.add_argument("--compare-stores", default=None, metavar="SHAPES",
                   help="run the bench once per store, e.g. single,3 or single,1x0,2x0,3x0: 'single' is one "
                        "redis-server, N a cluster of N primaries with --store-replicas each, NxR one of N "
                        "primaries with R replicas each; then a table of the runs side by side")
    p.set_defaults(func=run_delivery_bench)


def run_delivery_bench(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    try:
        shapes = shapes_from_args(args)
    except ValueError as exc:
        print(f"bench delivery: {exc}", file=sys.stderr)
        return 2
    if w is None:
        return 2
    results = []
    for shape in shapes:
        args.shape = shape
        with stage(args, w, shape) as st:
            result = _run(args, w, st)
            result["load_s"] = round(st.load_s, 1)
        results.append(result)
        if len(shapes) > 1 and not args.json:
            _print(result)
            print()
    if len(shapes) > 1:
        from bluedove.lab.bench.delivery_stores import compared, print_compared

        report(compared(results), args.json, print_compared)
    else:
        report(results[0], args.json, _print)
    bad = [r for r in results if not r["exact"]]
    for r in bad:
        print(f"bench delivery ({r['store']}): DELIVERIES ARE NOT EXACT: {r['verify']} {r['errors']}",
              file=sys.stderr)
    return 1 if bad else 0


def _print(r: dict) -> None:
    print(f"store {r['store']}; workload {r['workload']}: {r['subscriptions']:,} subscriptions, {r['queues']:,} queues;"
          f" {r['matchers']} matchers, {r['dispatchers']} dispatcher(s), {r['publishers']} API publishers,"
          f" {r['feeders']} feeders,"
          f" {r['pollers']} pollers x {r['poller_connections']} connections (max=100,"
          f" each queue polled every {r['poll_interval_s']:g} s at most)")
    for name, ph in r["phases"].items():
        cpu = ", ".join(f"{k} {v:.0f}%" for k, v in ph["cpu_pct"].items())
        per_poll = "-" if ph["deliveries_per_poll"] is None else f"{ph['deliveries_per_poll']:.1f}"
        print(f"{name:<11} {ph['seconds']:>5.1f}s  published {ph['published_per_s']:>7,} msg/s  written"
              f" {ph['written_per_s']:>7,}/s  acked {ph['acked_per_s']:>7,}/s  {per_poll} per poll  backlog"
              f" {ph['backlog_start']:,} -> {ph['backlog_end']:,}\n            cpu: {cpu};"
              f" machine {ph['machine_busy_pct']:.0f}% of {100 * r['cpus']}%")
        print("            " + store_line(ph["store"]))
    v = r["verify"]
    print(f"goals: write {r['write_per_s']:,}/s (goal {r['goals']['write_per_s']:,}), sustained drain"
          f" {r['drain_per_s']:,}/s (goal {r['goals']['drain_per_s']:,}, sustained {r['sustained']},"
          f" {r['deliveries_per_poll']} deliveries per poll)")
    print(f"verify: {v['sample_queues']} queues, {v['expected']:,} expected deliveries: missing {v['missing']},"
          f" unexpected {v['unexpected']}, duplicates {v['duplicates']}, wrong lists {v['wrong_subscriptions']};"
          f" exact {r['exact']}")
    print(f"feeders: the write phase's messages prepared ahead (up to {PREBUILD_PER_S:,} msg/s); built while"
          f" writing at full speed: {v['feeders_built_live']:,}")
