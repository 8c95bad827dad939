"""Scale-in drains first: a matcher hands its segments off before its pod is removed.

As an operator evacuates a node before removing it: the backend asks the member whose pod goes
next to leave (its Leave RPC, leave = merge), waits until the stored segment table no longer lists
it as an owner, and only then lowers the StatefulSet's replicas. A refusal or a timeout leaves the
replicas as they are and says why; the next decision tries again. A pod that owns no segments is
not drained: SIGTERM's leave (`bluedove matcher --leave-on-sigterm`) stays as the safety net for
one that is given some meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc

from bluedove.autoscaler.backends import Drainer
from bluedove.runtime import tls
from bluedove.store.store import AutoscalerStore
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

# How often the stored table is read while a member hands off.
POLL_S = 0.5


def pods_to_drain(statefulset: str, replicas: int, target: int) -> list[str]:
    """The pods a StatefulSet removes going from `replicas` down to `target`, in its order: the
    highest ordinal first (pod ids are pod names, `<statefulset>-<ordinal>`)."""
    return [f"{statefulset}-{ordinal}" for ordinal in range(replicas - 1, target - 1, -1)]


def table_owners(raw: dict[str, Any] | None) -> dict[str, str]:
    """Member id -> address of everyone a stored table (AutoscalerStore.get_table) gives segments to."""
    if not raw:
        return {}
    members = dict(raw.get("members") or {})
    for per_dim in raw.get("owners") or []:
        for owner in per_dim:
            members.setdefault(owner, "")
    return {m: a or "" for m, a in members.items()}


def drain(drainer: Drainer, member: str, timeout_s: float, poll_s: float = POLL_S,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> tuple[bool, str]:
    """Empty `member` of segments: (whether its pod may go now, what happened in one phrase)."""
    owners = drainer.owners()
    if member not in owners:
        return True, f"{member} owns no segments (not drained)"
    address = owners[member]
    if not address:
        return False, f"{member} owns segments but the stored table has no address for it; not drained"
    start = clock()
    ok, why = drainer.leave(address, timeout_s)
    if not ok:
        return False, f"{member} did not leave: {why}"
    while member in drainer.owners():
        waited = clock() - start
        if waited >= timeout_s:
            return False, f"{member} still owns segments {waited:.0f} s after its leave (--drain-timeout {timeout_s:g})"
        sleep(min(poll_s, max(0.0, timeout_s - waited)))
    return True, f"{member} drained in {clock() - start:.1f} s"


class MatcherDrainer:
    """The stored table through the autoscaler's store (on `loop`), the Leave RPC over gRPC.

    Its methods block: call them from a worker thread (the runner calls backends through
    asyncio.to_thread), never from `loop` itself."""

    def __init__(self, store: AutoscalerStore, loop: asyncio.AbstractEventLoop, store_timeout_s: float = 10.0,
                 tls_files: tls.TlsFiles | None = None) -> None:
        self.store = store
        self.tls = tls_files
        self.loop = loop
        self.store_timeout_s = store_timeout_s

    def owners(self) -> dict[str, str]:
        raw = asyncio.run_coroutine_threadsafe(self.store.get_table(), self.loop).result(self.store_timeout_s)
        return table_owners(raw)

    def leave(self, address: str, timeout_s: float) -> tuple[bool, str]:
        with tls.channel(address, self.tls) as ch:
            try:
                reply = pb_grpc.MatcherStub(ch).Leave(pb.LeaveRequest(), timeout=timeout_s)
            except grpc.RpcError as e:
                return False, f"Leave RPC to {address}: {e.code().name} {e.details()}"
        return reply.ok, reply.reason
