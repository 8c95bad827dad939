"""`bench e2e`'s CPU account of a rate step: each process's CPU per published message (dispatchers,
matchers, Redis through psutil; the load generators count their own), the matchers' CPU in the
index walk (their Report's `walk_cpu_s`), and the whole service's CPU per message over the
kernel's on the same workload."""

from __future__ import annotations

import re
import time
import urllib.request

from bluedove.lab.bench.cpu import cpu_seconds, role
from bluedove.runtime import tls
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

SERVICE = ("dispatchers", "matchers", "redis")  # the service's processes; publishers are the load


_CALLS = re.compile(r"^bluedove_(forward_calls|forwarded_messages)_total (\S+)$", re.M)


class CpuProbe:
    """Snapshots of the CPU seconds of named processes, of the matchers' walk totals and, given
    the one dispatcher's /metrics address, of its Forward calls and the messages they carried."""

    def __init__(self, pids: dict[str, int], matchers: dict[str, str], metrics_url: str | None = None) -> None:
        self.pids = pids
        self.metrics_url = metrics_url
        self._channels = {m: tls.channel(a, None) for m, a in matchers.items()}
        self._stubs = {m: pb_grpc.MatcherStub(ch) for m, ch in self._channels.items()}

    def snap(self) -> dict:
        walk, matched = {}, {}
        for m, stub in self._stubs.items():
            r = stub.Report(pb.ReportRequest(), timeout=10)
            walk[m] = sum(d.walk_cpu_s for d in r.dims)
            matched[m] = sum(d.matched_total for d in r.dims)
        calls = None
        if self.metrics_url:
            with urllib.request.urlopen(self.metrics_url, timeout=10) as f:
                found = dict(_CALLS.findall(f.read().decode()))
            calls = (float(found.get("forward_calls", 0)), float(found.get("forwarded_messages", 0)))
        return {"t": time.monotonic(), "cpu": {n: cpu_seconds(p) for n, p in self.pids.items()},
                "walk": walk, "matched": matched, "calls": calls}

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()


def idle_pct(a: dict, b: dict) -> dict[str, float]:
    """Each process's CPU between two snapshots with no load, in % of one core."""
    dt = max(b["t"] - a["t"], 1e-9)
    return {n: round(100 * (b["cpu"][n] - a["cpu"][n]) / dt, 1) for n in a["cpu"]}


def _us(seconds: float, messages: int) -> float:
    return round(seconds * 1e6 / messages, 2)


def account(a: dict, b: dict, messages: int, publisher_cpu_s: list[float]) -> dict | None:
    """CPU per published message between snapshots `a` and `b` (None if no message got through).

    `matcher_walk` and `matcher_outside_walk` are per published message (they add up to
    `matchers`); `matcher_outside_walk_per_matched` is per message a matcher matched (several
    per published message under p2p), the figure of the ≤ 5 µs goal."""
    if messages <= 0:
        return None
    by_process = {n: _us(b["cpu"][n] - a["cpu"][n], messages) for n in a["cpu"]}
    by_process.update({f"P{i + 1}": _us(s, messages) for i, s in enumerate(publisher_cpu_s)})
    roles: dict[str, float] = {}
    for n, v in by_process.items():
        roles[role(n)] = round(roles.get(role(n), 0.0) + v, 2)
    walk_s = sum(b["walk"][m] - a["walk"][m] for m in a["walk"])
    matched = sum(b["matched"][m] - a["matched"][m] for m in a["matched"])
    matchers_s = sum(b["cpu"][n] - a["cpu"][n] for n in a["cpu"] if role(n) == "matchers")
    calls = {}
    if a.get("calls") and b.get("calls"):
        n_calls, carried = b["calls"][0] - a["calls"][0], b["calls"][1] - a["calls"][1]
        calls = {"forward_calls_per_s": round(n_calls / max(b["t"] - a["t"], 1e-9)),
                 "messages_per_forward_call": round(carried / n_calls, 1) if n_calls else None}
    return {"messages": messages, "seconds": round(b["t"] - a["t"], 2), **calls,
            "us_per_msg": by_process, "roles_us_per_msg": roles,
            "service_us_per_msg": round(sum(roles.get(r, 0.0) for r in SERVICE), 2),
            "matcher_walk_us_per_msg": _us(walk_s, messages),
            "matcher_outside_walk_us_per_msg": _us(matchers_s - walk_s, messages),
            "matcher_messages": matched,
            "matcher_messages_by": {m: b["matched"][m] - a["matched"][m] for m in a["matched"]},
            "matcher_walk_us_per_matched": _us(walk_s, matched) if matched else None,
            "matcher_outside_walk_us_per_matched": _us(matchers_s - walk_s, matched) if matched else None}


def with_kernel(cpu: dict | None, kernel_us: float) -> dict | None:
    """The account with the kernel's CPU per message beside it and the service's over it."""
    if cpu is None:
        return None
    return {**cpu, "kernel_us_per_msg": float(f"{kernel_us:.4g}"),
            "service_over_kernel": round(cpu["service_us_per_msg"] / kernel_us, 2)}


def print_cpu(r: dict) -> None:
    """The text report's CPU part: per system, CPU µs per published message by role at its
    reported step, the service's over the kernel's, and the profiles when there are."""
    goals = r["goals"]
    print(f"CPU µs per published message at each system's reported step (transport {r['transport']}; "
          f"goals: service / kernel <= {goals['service_over_kernel']}x, matcher outside the walk <= "
          f"{goals['matcher_outside_walk_us_per_matched']} µs per message matched):")
    head = ("system", "dispatchers", "matchers (walk + rest)", "redis", "service", "net of idle", "kernel",
            "service/kernel", "matcher rest per matched (net)", "publishers")
    rows = []
    for name, s in r["systems"].items():
        c = s.get("cpu")
        if not c:
            rows.append((name, *["-"] * (len(head) - 1)))
            continue
        roles = c["roles_us_per_msg"]
        rows.append((name, roles.get("dispatchers", "-"),
                     f"{roles.get('matchers', 0)} ({c['matcher_walk_us_per_msg']} + "
                     f"{c['matcher_outside_walk_us_per_msg']})",
                     roles.get("redis", "-"), c["service_us_per_msg"], c.get("service_net_us_per_msg", "-"),
                     c["kernel_us_per_msg"], f"{c['service_over_kernel']}x",
                     f"{c['matcher_outside_walk_us_per_matched']} ({c.get('matcher_outside_walk_net_us_per_matched')})",
                     roles.get("publishers", "-")))
    width = [max(len(str(x[i])) for x in (head, *rows)) for i in range(len(head))]
    for row in (head, *rows):
        print("  ".join(str(x).ljust(wd) for x, wd in zip(row, width)).rstrip())
    for name, s in r["systems"].items():
        c = s.get("cpu") or {}
        if c.get("forward_calls_per_s") is not None:
            print(f"{name}: {c['forward_calls_per_s']:,} Forward calls/s, "
                  f"{c['messages_per_forward_call']} messages per call")
    for name, s in r["systems"].items():
        for proc, p in (s.get("profile") or {}).get("processes", {}).items():
            if not p.get("us_per_msg"):
                print(f"profile {name} {proc}: {p.get('error', 'no samples')}")
                continue
            cats = ", ".join(f"{c} {v}" for c, v in p["us_per_msg"].items() if v)
            print(f"profile {name} {proc} at {s['profile']['achieved']:,} msg/s (µs per message"
                  f"{' it matched' if proc.startswith('m') else ''}; sampled {p['sampled_us_per_msg']},"
                  f" process {p.get('process_us_per_msg')}): {cats}")


def net_of_idle(cpu: dict | None, idle: dict[str, float]) -> dict | None:
    """The account with the service's background CPU (each process's `idle` % of a core, over
    the step's seconds) per message beside it, and the service's and a matcher's figures net of
    it: at a low rate the background is a large part of the CPU per message."""
    if cpu is None:
        return None
    per = {n: pct / 100 * cpu["seconds"] * 1e6 / cpu["messages"] for n, pct in idle.items()}
    service_idle = sum(v for n, v in per.items() if role(n) in SERVICE)
    matchers_idle = sum(v for n, v in per.items() if role(n) == "matchers")
    out = {**cpu, "idle_us_per_msg": round(service_idle, 2),
           "service_net_us_per_msg": round(cpu["service_us_per_msg"] - service_idle, 2)}
    if cpu["matcher_messages"]:
        out["matcher_outside_walk_net_us_per_matched"] = round(
            (cpu["matcher_outside_walk_us_per_msg"] - matchers_idle) * cpu["messages"] / cpu["matcher_messages"], 2)
    return out
