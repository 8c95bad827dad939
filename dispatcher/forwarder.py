"""One-hop forwarding with internal batching and failover.

Each message goes to the best candidate by the policy. Messages bound for the same matcher
share Forward calls, whatever their dimensions (one part per dimension): a lane takes
whatever has queued up, up to `forward_batch_max`, with at most `forward_inflight` calls
under way. A call costs both tiers far more than a message does, so one lane per matcher
rather than per (matcher, dimension) makes k times fewer, bigger calls. A message whose call
fails or times out goes to its next candidate; the matcher's dedup on message id makes a
retry after a late success deliver nothing twice. `publish` returns only when every message
is matched and stored, or raises when some message has no candidate left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import grpc

from bluedove.errors import unavailable
from bluedove.settings import DispatcherSettings
from bluedove.v1 import matcher_pb2 as pb
from dispatcher.cluster import ClusterView

log = logging.getLogger("bluedove.dispatcher")


class _Lane:
    """Calls to one matcher, batched."""

    def __init__(self, fwd: "Forwarder", member: str) -> None:
        self.fwd, self.member = fwd, member
        self.items: deque[tuple[int, pb.ForwardMessage, asyncio.Future]] = deque()
        self.sem = asyncio.Semaphore(fwd.s.forward_inflight)
        self.running = False

    def submit(self, dim: int, msg: pb.ForwardMessage) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.items.append((dim, msg, fut))
        if not self.running:
            self.running = True
            asyncio.get_running_loop().create_task(self._drain())
        return fut

    async def _drain(self) -> None:
        try:
            while self.items:
                await self.sem.acquire()
                batch = [self.items.popleft() for _ in range(min(len(self.items), self.fwd.s.forward_batch_max))]
                if not batch:
                    self.sem.release()
                    break
                asyncio.get_running_loop().create_task(self._call(batch))
        finally:
            self.running = False
            if self.items:  # raced with a submit after the loop ended
                self.running = True
                asyncio.get_running_loop().create_task(self._drain())

    async def _call(self, batch) -> None:
        try:
            by_dim: dict[int, list[pb.ForwardMessage]] = {}
            for dim, m, _ in batch:
                by_dim.setdefault(dim, []).append(m)
            (dim, msgs), *more = by_dim.items()
            req = pb.ForwardRequest(dimension=dim, messages=msgs, epoch=self.fwd.cluster.table.epoch,
                                    parts=[pb.ForwardPart(dimension=d, messages=ms) for d, ms in more])
            await self.fwd.cluster.stub(self.member).Forward(req, timeout=self.fwd.s.forward_timeout_s)
            self.fwd.cluster.mark_up(self.member)  # it answers again: no backoff left from past failures
            for _, _, f in batch:
                if not f.done():
                    f.set_result(True)
        except Exception as exc:  # noqa: BLE001 - an RPC error or other, reported to each waiting publisher
            for _, _, f in batch:
                if not f.done():
                    f.set_result(exc)
        finally:
            self.sem.release()


class Forwarder:
    def __init__(self, settings: DispatcherSettings, cluster: ClusterView) -> None:
        self.s = settings
        self.cluster = cluster
        self._lanes: dict[str, _Lane] = {}
        self.failovers = 0

    def _lane(self, member: str) -> _Lane:
        lane = self._lanes.get(member)
        if lane is None:
            lane = self._lanes[member] = _Lane(self, member)
        return lane

    def _charge_next(self, ranked: list[tuple[int, str]], attempt: int) -> None:
        """The message goes on to its next candidate: count it there (the adaptive estimate)."""
        if attempt < len(ranked):
            self.cluster.charge(ranked[attempt])

    async def publish(self, messages: list[pb.ForwardMessage]) -> None:
        """Match and store every message; raises ApiError(503) if one cannot be placed."""
        if self.cluster.table is None:
            raise unavailable("no segment table yet: the cluster is starting")
        now = time.monotonic()
        ranked = [self.cluster.ranked_candidates(m.point, now) for m in messages]
        attempt = [0] * len(messages)
        reranks = [0] * len(messages)
        store_failed = False
        pending = list(range(len(messages)))
        while pending:
            futures = []
            for i in pending:
                if attempt[i] >= len(ranked[i]):
                    if store_failed:
                        raise unavailable("the store is unreachable; retry with the same id")
                    raise unavailable("no candidate matcher could take the message; retry with the same id")
                dim, member = ranked[i][attempt[i]]
                futures.append(self._lane(member).submit(dim, messages[i]))
            results = await asyncio.gather(*futures)
            retry, stale, blamed = [], [], set()
            failed: dict[tuple[str, int, object], int] = {}
            for i, res in zip(pending, results):
                if res is True:
                    continue
                dim, member = ranked[i][attempt[i]]
                code = res.code() if isinstance(res, grpc.aio.AioRpcError) else None
                if code == grpc.StatusCode.FAILED_PRECONDITION and reranks[i] < 3:
                    # The matcher no longer owns the value: re-rank on a fresh table (below).
                    reranks[i] += 1
                    stale.append((i, member))
                elif code == grpc.StatusCode.ABORTED:
                    # The matcher is fine but could not write to the store: try another, blame none.
                    store_failed = True
                    attempt[i] += 1
                    self._charge_next(ranked[i], attempt[i])
                else:
                    blamed.add(member)
                    attempt[i] += 1
                    self._charge_next(ranked[i], attempt[i])
                key = (member, dim, code or type(res).__name__)
                failed[key] = failed.get(key, 0) + 1
                retry.append(i)
            for member in blamed:  # one failure per failed call, not one per message it carried
                self.cluster.mark_down(member)
            if stale:  # one table pull for the whole round, however many messages it concerns,
                # from a matcher that refused: it has adopted a newer table than ours
                await self.cluster.pull_table(stale[0][1])
                now = time.monotonic()
                for i, _ in stale:
                    ranked[i] = self.cluster.ranked_candidates(messages[i].point, now)
                    attempt[i] = 0
            for (member, dim, why), n in failed.items():
                self.failovers += n
                log.warning("forward of %d message(s) to %s dim %d failed (%s); trying the next candidate",
                            n, member, dim, why)
            pending = retry
