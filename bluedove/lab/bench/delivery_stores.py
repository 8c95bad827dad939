"""`bluedove bench delivery --compare-stores …`: the runs of one bench on several stores side by
side. On one machine a cluster shares the same cores as everything else, so it cannot be faster
than one server there; what the table shows is the cost per delivery, how it grows with the
nodes, and how evenly the deliveries spread over the primaries."""

from __future__ import annotations

PHASES = ("write", "drain", "sustain")


def _row(r: dict) -> dict:
    ph = r["phases"]
    write_nodes = [n for n in ph["write"]["store"]["nodes"] if n["role"] == "primary"]
    return {
        "store": r["store"], "write_per_s": r["write_per_s"], "drain_only_per_s": r["drain_only_per_s"],
        "sustained_per_s": r["sustained_per_s"],
        "redis_cpu_us_per_delivery": {k: ph[k]["store"]["redis_cpu_us_per_delivery"] for k in PHASES},
        "replica_cpu_us_per_delivery": {k: ph[k]["store"]["replica_cpu_us_per_delivery"] for k in PHASES},
        "redis_cpu_pct": {k: ph[k]["cpu_pct"].get("redis", 0.0) for k in PHASES},
        "machine_busy_pct": {k: ph[k]["machine_busy_pct"] for k in PHASES},
        # every role's CPU per delivery written in `write` (the matchers' store client included)
        "write_cpu_us_per_delivery": {role: round(1e4 * pct / max(ph["write"]["written_per_s"], 1), 2)
                                      for role, pct in ph["write"]["cpu_pct"].items()},
        # each primary in `write`: its share of the deliveries written, and its CPU per delivery
        "share_written": [n["share_written"] for n in write_nodes],
        "node_cpu_us_per_delivery": [n["cpu_us_per_delivery"] for n in write_nodes],
        "exact": r["exact"],
    }


def compared(results: list[dict]) -> dict:
    """One object: every run whole (`runs`, as `bench delivery --json` prints one) and a row per
    store (`table`)."""
    return {"kind": "delivery-stores", "stores": [r["store"] for r in results],
            "table": [_row(r) for r in results], "runs": results,
            "exact": all(r["exact"] for r in results)}


def print_compared(c: dict) -> None:
    print("store  | written/s | drained/s (drain) | sustained/s | redis µs/delivery write, drain, sustain"
          " | replicas µs (same) | each primary in write: share of deliveries, µs/delivery | exact")
    for t in c["table"]:
        us = ", ".join(_f(t["redis_cpu_us_per_delivery"][k]) for k in PHASES)
        rep = ", ".join(_f(t["replica_cpu_us_per_delivery"][k]) for k in PHASES)
        nodes = ", ".join(f"{100 * s:.0f}% {_f(u)}" for s, u in zip(t["share_written"], t["node_cpu_us_per_delivery"]))
        print(f"{t['store']:<6} | {t['write_per_s']:>9,} | {t['drain_only_per_s']:>17,} | {t['sustained_per_s']:>11,}"
              f" | {us} | {rep} | {nodes} | {t['exact']}")
    print("µs of CPU per delivery written in write, by role:")
    for t in c["table"]:
        print(f"{t['store']:<6} " + ", ".join(f"{k} {v:.1f}" for k, v in t["write_cpu_us_per_delivery"].items()))


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"
