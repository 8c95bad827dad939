"""`bluedove bench gossip`: spread, detection and traffic of gossip, simulated and on real processes."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time

from bluedove.gossip import simulate
from bluedove.lab.bench import BENCHES
from bluedove.lab.bench.base import add_output_flags
from bluedove.local.cluster import LocalCluster
from bluedove.runtime import tls
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc


def _simulated(seed: int) -> dict:
    out: dict = {"rounds_to_converge": {}, "detection_s": {}, "bytes_per_member_s": {}, "envelopes_per_member_s": {}}
    for n in (10, 50, 200):
        out["rounds_to_converge"][n] = round(simulate.rounds_to_converge(n, seed=seed), 2)
    for n in (4, 50, 200):
        d = simulate.detection_time(n, seed=seed)
        out["detection_s"][n] = {"first": round(d.first_s, 2), "all": round(d.all_s, 2)}
    for n, secs in ((4, 10.0), (50, 5.0), (200, 2.0)):
        out["bytes_per_member_s"][n] = round(simulate.bytes_per_member_s(n, seconds=secs, seed=seed))
        out["envelopes_per_member_s"][n] = round(simulate.envelopes_per_member_s(n, seconds=secs, seed=seed), 1)
    return out


def _ask(addresses: dict[str, str], call: str, request) -> dict:
    """One unary call to every matcher: {member: reply}."""
    out = {}
    for m, a in addresses.items():
        with tls.channel(a, None) as ch:
            out[m] = getattr(pb_grpc.MatcherStub(ch), call)(request, timeout=5)
    return out


def _reports(addresses: dict[str, str]) -> dict[str, pb.ReportReply]:
    return _ask(addresses, "Report", pb.ReportRequest())


def _views(addresses: dict[str, str]) -> dict[str, pb.TableReply]:
    return _ask(addresses, "GetTable", pb.TableRequest())


def _real(matchers: int, settle_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="bluedove-bench-") as tmp:
        cluster = LocalCluster(matchers=matchers, http_port=0, data_dir=tmp, quiet=True, restart=False).start()
        try:
            addrs = dict(cluster.table.members)
            time.sleep(2.0)
            before, t0 = _reports(addrs), time.monotonic()
            time.sleep(settle_s)
            after, t1 = _reports(addrs), time.monotonic()
            per_s = [(after[m].gossip_bytes_sent - before[m].gossip_bytes_sent) / (t1 - t0) for m in addrs]
            sent_s = [(after[m].gossip_messages_sent - before[m].gossip_messages_sent) / (t1 - t0) for m in addrs]
            victim = f"m{matchers}"
            survivors = {m: a for m, a in addrs.items() if m != victim}
            epoch = json.loads(next(iter(_views(survivors).values())).table_json)["epoch"]
            os.kill(cluster.child(victim).pid, signal.SIGKILL)
            killed = time.monotonic()
            dead_at = taken_at = None
            while time.monotonic() - killed < 30 and (dead_at is None or taken_at is None):
                views = _views(survivors)
                now = time.monotonic()
                if dead_at is None and all(any(x.id == victim and x.status == "dead" for x in v.members)
                                           for v in views.values()):
                    dead_at = now
                if taken_at is None and all(json.loads(v.table_json)["epoch"] > epoch for v in views.values()):
                    taken_at = now
                time.sleep(0.02)
        finally:
            cluster.stop()
    return {
        "matchers": matchers,
        "bytes_per_matcher_s": round(sum(per_s) / len(per_s)),
        "envelopes_per_matcher_s": round(sum(sent_s) / len(sent_s), 1),
        "kill_to_dead_everywhere_s": round(dead_at - killed, 2) if dead_at else None,
        "kill_to_new_table_everywhere_s": round(taken_at - killed, 2) if taken_at else None,
    }


def add_parser(sub) -> None:
    p = sub.add_parser("gossip", help=BENCHES["gossip"])
    add_output_flags(p)
    p.set_defaults(func=run_gossip_bench)


def run_gossip_bench(args) -> int:
    result = {"bench": "gossip", "simulated": _simulated(args.seed), "real": _real(4, settle_s=10.0)}
    if args.json:
        print(json.dumps(result))
        return 0
    sim, real = result["simulated"], result["real"]
    print("simulated network (1-10 ms delay), default timings")
    print("  members   rounds to converge   dead everywhere (s)   bytes/s per member   envelopes/s per member")
    for n in (4, 10, 50, 200):
        conv = sim["rounds_to_converge"].get(n, "")
        det = sim["detection_s"].get(n, {}).get("all", "")
        b = sim["bytes_per_member_s"].get(n, "")
        e = sim["envelopes_per_member_s"].get(n, "")
        print(f"  {n:>7}   {conv!s:>17}   {det!s:>19}   {b!s:>18}   {e!s:>22}")
    print(f"real processes: {real['matchers']} matchers on loopback")
    print(f"  gossip bytes/s per matcher      {real['bytes_per_matcher_s']}")
    print(f"  gossip envelopes/s per matcher  {real['envelopes_per_matcher_s']}")
    print(f"  SIGKILL to dead everywhere      {real['kill_to_dead_everywhere_s']} s")
    print(f"  SIGKILL to new table everywhere {real['kill_to_new_table_everywhere_s']} s")
    return 0
