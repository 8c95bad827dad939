"""`bluedove bench replay`: what a space's message log costs the publish path, and how fast a replay reads it.

A local cluster (`--matchers`, default 2) gets two spaces of the workload's schema and the same
`--subs` subscriptions: `plain` (no log) and `logged` (`retention_s` 3600). Each of `--rounds`
rounds publishes REST batches of `--batch` through `--publishers` processes for `--duration`
seconds to `plain`, then to `logged` (the other way round every other round; closed loop: as
fast as they are answered). Per phase:
the messages accepted a second, and each role's CPU per accepted message (µs: the matchers,
the dispatcher, redis-server). The log's cost is the ratio of `logged` to `plain`, per role and
in all, medians over the rounds: the same processes, the same subscriptions, alternating.

Then, after `--history-s` seconds more of publishing to `logged`, a subscription of one narrow
box replays `logged` from before the first round: the time
from its subscribe to its replay done, the messages the log held, and the dispatcher's CPU
meanwhile, so the rate per second of one core (the replay rests three times as long as it
works, so its wall rate is about a quarter of its CPU rate), and the log's bytes in Redis per message. Last, the
same replay again while the publishers keep `plain` busy: its rate under load, and the
publishing rate meanwhile against `plain`'s (what a replay takes from live publishing).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bluedove.client import AsyncClient
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags, add_workload_flags, report, workload_or_none
from bluedove.lab.bench.cpu import cpu_seconds, role
from bluedove.lab.load import closed_loop, pool
from bluedove.local.cluster import LocalCluster
from bluedove.store import keys as K
from bluedove.store.client import sync_client

PLAIN, LOGGED = "plain", "logged"
CALLS = 4  # batch calls under way per publisher process


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help=BENCHES["replay"])
    add_workload_flags(p, subs=2000)
    p.add_argument("--matchers", type=int, default=2, help="matcher processes (default 2)")
    p.add_argument("--publishers", type=int, default=2, help="publisher processes (default 2)")
    p.add_argument("--batch", type=int, default=100, help="messages per REST batch (default 100)")
    p.add_argument("--duration", type=float, default=8.0, help="seconds of each phase (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the two phases (default 3)")
    p.add_argument("--history-s", type=float, default=30.0,
                   help="seconds more of publishing to the logged space before its replay (default 30)")
    add_output_flags(p)
    p.set_defaults(func=run)


async def _publish(url: str, space: str, names: list[str], batch: int, until: float, seed: int) -> int:
    rng = np.random.default_rng([seed, os.getpid()])
    transport = pool(url, CALLS, timeout_s=60.0)

    async def send() -> list[str]:
        bodies = [{"attributes": dict(zip(names, p)), "payload": {"b": 1}}
                  for p in rng.uniform(0.0, 1000.0, (batch, len(names))).tolist()]
        return await transport.publish_batch(bodies, space=space)
    try:
        return len((await closed_loop(send, CALLS, until))[1])
    finally:
        await transport.close()


def publisher_main(url: str, space: str, names: list[str], batch: int, seconds: float, seed: int, out) -> None:
    try:
        out.put(asyncio.run(_publish(url, space, names, batch, time.monotonic() + seconds, seed)))
    except Exception as exc:  # noqa: BLE001 - reported by the bench
        out.put(repr(exc))


class Publishers:
    """`--publishers` processes publishing to `space` for `seconds` (`publisher_main`), started at once."""

    def __init__(self, args, url: str, space: str, names: list[str], seconds: float, seed: int) -> None:
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        self.seconds = seconds
        self.procs = [ctx.Process(target=publisher_main, daemon=True,
                                  args=(url, space, names, args.batch, seconds, seed + i, self.out))
                      for i in range(args.publishers)]
        self.t0 = time.monotonic()
        for p in self.procs:
            p.start()

    def results(self) -> tuple[int, list[str], float]:
        """(messages accepted, errors, seconds since the start) once every process has answered."""
        got = [self.out.get(timeout=self.seconds + 120) for _ in self.procs]
        dt = time.monotonic() - self.t0
        for p in self.procs:
            p.join(timeout=10)
        return sum(g for g in got if isinstance(g, int)), [g for g in got if isinstance(g, str)], dt


def _phase(args, url: str, space: str, names: list[str], pids: dict[str, int]) -> dict:
    """One phase: accepted messages a second, and each role's CPU µs per accepted message."""
    before = {n: cpu_seconds(p) for n, p in pids.items()}
    accepted, errors, dt = Publishers(args, url, space, names, args.duration, args.seed).results()
    spent: dict[str, float] = {}
    for n, p in pids.items():
        spent[role(n)] = spent.get(role(n), 0.0) + cpu_seconds(p) - before[n]
    per_msg = {r: round(1e6 * v / max(accepted, 1), 1) for r, v in spent.items()}
    per_msg["all"] = round(sum(per_msg.values()), 1)
    return {"msgs_per_s": round(accepted / dt), "messages": accepted, "cpu_us_per_msg": per_msg, "errors": errors[:3]}


async def _spaces(url: str, w) -> None:
    attrs = [{"name": d.name, "min": d.min, "max": d.max} for d in w.space.dimensions]
    preds = [w.predicates(j) for j in range(w.n_subs)]
    async with AsyncClient(url) as c:
        await c.create_space({"name": PLAIN, "attributes": attrs})
        await c.create_space({"name": LOGGED, "attributes": attrs, "retention_s": 3600})
        for name in (PLAIN, LOGGED):
            per = max(1, len(preds) // 10)
            for i in range(0, len(preds), per):
                await c.in_space(name).subscribe_many(preds[i:i + per], await c.create_queue())


def _replay(url: str, from_ms: int, logged: int, pids: dict[str, int]) -> dict:
    """A narrow subscription replaying the whole log: its time, the dispatcher's CPU, the rate."""
    dispatchers = [p for n, p in pids.items() if role(n) == "dispatchers"]
    with httpx.Client(base_url=url, timeout=60) as api:
        cpu0, t0 = sum(cpu_seconds(p) for p in dispatchers), time.monotonic()
        r = api.post(f"/v1/spaces/{LOGGED}/subscriptions",
                     json={"predicates": {"x0": [500, 501]}, "replay_from": from_ms})
        r.raise_for_status()
        sub, auth = r.json(), {"Authorization": f"Bearer {r.json()['token']}"}
        while not (state := api.get(f"/v1/subscriptions/{sub['id']}", headers=auth).json()["replay"])["done"]:
            time.sleep(0.05)
        wall, cpu = time.monotonic() - t0, sum(cpu_seconds(p) for p in dispatchers) - cpu0
    return {"messages": logged, "seconds": round(wall, 2), "dispatcher_cpu_s": round(cpu, 2),
            "per_s": round(logged / wall), "per_cpu_s": round(logged / max(cpu, 1e-9)),
            "delivered": state["delivered"]}


def _replay_under_load(args, url: str, names: list[str], pids: dict[str, int], from_ms: int, logged: int,
                       alone_s: float) -> dict:
    """The same replay while publishers keep `plain` busy: the publishers start 1 s before it
    and stop about when it is done (they run 1 s + 1.5 × the replay's time alone)."""
    publishers = Publishers(args, url, PLAIN, names, 1.0 + 1.5 * alone_s, args.seed + 100)
    time.sleep(1.0)
    replay = _replay(url, from_ms, logged, pids)
    accepted, errors, dt = publishers.results()
    return {"seconds": replay["seconds"], "per_s": replay["per_s"], "publish_msgs_per_s": round(accepted / dt),
            "errors": errors[:3]}


def _log_bytes(url: str) -> int:
    """What the logged space's log takes in Redis (MEMORY USAGE of each shard, every node sampled)."""
    r = sync_client(url)
    try:
        return sum(int(r.memory_usage(K.message_log(LOGGED, n), samples=0) or 0) for n in range(K.LOG_SHARDS))
    finally:
        r.close()


def _median(phases: list[dict]) -> dict:
    roles = phases[0]["cpu_us_per_msg"]
    return {"msgs_per_s": float(np.median([p["msgs_per_s"] for p in phases])),
            "cpu_us_per_msg": {r: float(np.median([p["cpu_us_per_msg"][r] for p in phases])) for r in roles}}


def run(args: argparse.Namespace) -> int:
    w = workload_or_none(args)
    if w is None:
        return 2
    names = list(w.space.names)
    with tempfile.TemporaryDirectory(prefix="bd-bench-replay-") as tmp:
        cluster = LocalCluster(matchers=args.matchers, http_port=0, data_dir=Path(tmp), quiet=True).start()
        try:
            asyncio.run(_spaces(cluster.url, w))
            pids = {"redis": cluster.redis.proc.pid, **{c.name: c.pid for c in cluster.children}}
            start = int(time.time() * 1000) - 1
            runs: dict[str, list[dict]] = {PLAIN: [], LOGGED: []}
            for i in range(args.rounds):  # the order alternates, so neither always goes first
                for name in (PLAIN, LOGGED) if i % 2 == 0 else (LOGGED, PLAIN):
                    runs[name].append(_phase(args, cluster.url, name, names, pids))
            logged = sum(p["messages"] for p in runs[LOGGED])
            if args.history_s > 0:
                args.duration = args.history_s
                logged += _phase(args, cluster.url, LOGGED, names, pids)["messages"]
            replay = _replay(cluster.url, start, logged, pids)
            replay["log_bytes_per_message"] = round(_log_bytes(cluster.store_url) / max(logged, 1), 1)
            replay["under_load"] = _replay_under_load(args, cluster.url, names, pids, start, logged,
                                                      replay["seconds"])
        finally:
            cluster.stop()
    med = {n: _median(r) for n, r in runs.items()}
    ratio = {r: round(med[LOGGED]["cpu_us_per_msg"][r] / max(v, 1e-9), 3)
             for r, v in med[PLAIN]["cpu_us_per_msg"].items()}
    result = {"kind": "replay", "workload": w.name, "subscriptions": w.n_subs, "matchers": args.matchers,
              "publishers": args.publishers, "batch": args.batch, "duration": args.duration, "rounds": args.rounds,
              "cpus": os.cpu_count(), "runs": runs, "median": med, "cpu_ratio_logged_vs_plain": ratio,
              "rate_ratio_logged_vs_plain": round(med[LOGGED]["msgs_per_s"] / max(med[PLAIN]["msgs_per_s"], 1), 3),
              "replay": replay}
    result["replay"]["under_load"]["publish_vs_plain"] = round(
        result["replay"]["under_load"]["publish_msgs_per_s"] / max(med[PLAIN]["msgs_per_s"], 1), 3)
    result["ok"] = all(p["messages"] > 0 and not p["errors"] for r in runs.values() for p in r) \
        and not result["replay"]["under_load"]["errors"]
    report(result, args.json, _text)
    return 0 if result["ok"] else 1


def _text(r: dict) -> None:
    for name in (PLAIN, LOGGED):
        m = r["median"][name]
        print(f"{name:<7} {m['msgs_per_s']:>8,.0f} msg/s  CPU µs/msg " +
              "  ".join(f"{k} {v:.1f}" for k, v in m["cpu_us_per_msg"].items()))
    print("logged / plain: CPU per message " + "  ".join(f"{k} ×{v}" for k, v in r["cpu_ratio_logged_vs_plain"].items())
          + f"; rate ×{r['rate_ratio_logged_vs_plain']}")
    p = r["replay"]
    print(f"replay of {p['messages']:,} logged messages ({p['log_bytes_per_message']} B each in Redis): "
          f"{p['seconds']} s ({p['per_s']:,}/s), dispatcher CPU {p['dispatcher_cpu_s']} s "
          f"({p['per_cpu_s']:,}/CPU-s), {p['delivered']} delivered")
    u = p["under_load"]
    print(f"the same replay while publishing to plain: {u['seconds']} s ({u['per_s']:,}/s); publishing meanwhile "
          f"{u['publish_msgs_per_s']:,} msg/s (×{u['publish_vs_plain']} of plain's)")
