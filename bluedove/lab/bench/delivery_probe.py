"""`bench delivery`'s probe: snapshots of the backlog, the load's counters, each process's CPU and
the store's command stats, and a phase's figures between two snapshots."""

from __future__ import annotations

import asyncio
import os
import time

from bluedove.lab.bench.cpu import cpu_seconds, machine_ticks, role
from bluedove.lab.bench.procs import Control
from bluedove.lab.bench.store_nodes import BenchStore, NodeProbe, summed_commandstats
from bluedove.store import Store


class Probe:
    """Snapshots of backlog (through the Store), counters, CPU time per process and Redis
    command stats (each primary's INFO, summed; per node in `nodes`)."""

    def __init__(self, bench_store: BenchStore, queues: list[tuple[str, str]], pids: dict[str, int], sent: list,
                 poll: Control) -> None:
        self.sent, self.poll = sent, poll
        self.queues = [q for q, _ in queues]
        self.loop = asyncio.new_event_loop()  # the Store's, on the bench's thread
        self.store = Store(bench_store.url)
        self.nodes = NodeProbe(bench_store, self.queues, self.loop, self.store)
        self.pids = {**self.nodes.pids(), **pids}

    def backlog(self) -> int:
        return self.loop.run_until_complete(self.store.backlog(self.queues))

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()
        self.nodes.close()

    def snap(self) -> dict:
        nodes = self.nodes.snap()
        return {"t": time.monotonic(), "backlog": sum(n["backlog"] for n in nodes.values()),
                "published": sum(v.value for v in self.sent), "acked": self.poll.done.value,
                "polls": self.poll.polls.value, "cpu": {n: cpu_seconds(p) for n, p in self.pids.items()},
                "machine": machine_ticks(), "cmd": summed_commandstats(nodes), "nodes": nodes}

    def phase(self, a: dict, b: dict) -> dict:
        ph = _phase(a, b)
        ph["store"] = self.nodes.phase(a, b, round(ph["written_per_s"] * ph["seconds"]),
                                       round(ph["acked_per_s"] * ph["seconds"]))
        return ph


def _phase(a: dict, b: dict) -> dict:
    dt = b["t"] - a["t"]
    acked = b["acked"] - a["acked"]
    written = b["backlog"] - a["backlog"] + acked
    polls = b["polls"] - a["polls"]
    cpu = {n: round(100 * (b["cpu"][n] - a["cpu"][n]) / dt, 1) for n in a["cpu"]}
    roles: dict[str, float] = {}
    for n, v in cpu.items():
        roles[role(n)] = round(roles.get(role(n), 0.0) + v, 1)
    cmds = []
    busy_s = 0.0
    for key, st in b["cmd"].items():
        before = a["cmd"].get(key, {"calls": 0, "usec": 0})
        calls, usec = st["calls"] - before["calls"], st["usec"] - before["usec"]
        if calls > 0:
            cmds.append((usec, key.removeprefix("cmdstat_"), calls))
            busy_s += usec / 1e6
    cmds.sort(reverse=True)
    return {
        "seconds": round(dt, 2),
        "published_per_s": round((b["published"] - a["published"]) / dt),
        "written_per_s": round(written / dt),
        "acked_per_s": round(acked / dt),
        "polls_per_s": round(polls / dt),
        # Acked, not handed out: each poll's deliveries are acked before the next poll.
        "deliveries_per_poll": round(acked / polls, 1) if polls else None,
        "backlog_start": a["backlog"], "backlog_end": b["backlog"],
        "backlog_growth_per_s": round((b["backlog"] - a["backlog"]) / dt),
        "cpu_pct": roles, "cpu_pct_by_process": cpu,
        # The whole machine, in % of one core (200 = both of two cores busy): what the processes
        # above do not account for is other work (the kernel's, other tenants').
        "machine_busy_pct": round(100 * (os.cpu_count() or 1) * (b["machine"][0] - a["machine"][0])
                                  / max(b["machine"][1] - a["machine"][1], 1), 1),
        "redis_commands": [{"command": c, "calls_per_s": round(n / dt), "usec_per_call": round(u / n, 2),
                            "busy_pct": round(100 * u / 1e6 / dt, 1)} for u, c, n in cmds[:8]],
    }
