"""One-hop forwarding with internal batching and failover, a batch at a time.

A publish call's messages are ranked together (`ClusterView.rank_batch`), then grouped by
their choice (matcher, dimension): each group is one chunk with one future, not one future
per message. Chunks bound for the same matcher share Forward calls, whatever their dimensions
and whichever publish call they come from: a lane takes whatever has queued up, up to
`forward_batch_max` messages, and sends each dimension's messages as one packed part
(bluedove/core/wire.py). While a call is under way the next waits to gather what comes
meanwhile; more calls go out alongside (at most `forward_inflight`) only once half a call's
worth waits. A lane is a `Batcher` (bluedove/runtime/batcher.py, the subscribe path's
lanes are too) whose items are chunks weighing their messages (`Forwarder._submit`). A call
costs both tiers far more than a message does, so one lane per matcher rather than per
(matcher, dimension) makes k times fewer, bigger calls. A chunk whose call fails or times
out goes to each of its messages' next candidates; the matcher's dedup on message id makes
a retry after a late success deliver nothing twice. `publish` returns only when every
message is matched and stored, or raises when some message has no candidate left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from functools import partial

import grpc
import numpy as np
import numpy.typing as npt

from bluedove.core.errors import unavailable
from bluedove.core.forwarding import Ranking
from bluedove.core.wire import encode_part
from bluedove.dispatcher.publish.forward_stream import ForwardStream
from bluedove.dispatcher.routing import Routing
from bluedove.runtime.batcher import Batcher
from bluedove.runtime.settings import DispatcherSettings
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.dispatcher")

Rows = npt.NDArray[np.int64]  # row numbers of a publish call's messages
Answer = bool | Exception  # a chunk's: True once its matcher took it, else the exception its call met


@dataclass
class Outgoing:
    """Validated messages ready to forward: ids (the publisher's or ours), values, stored
    bodies, and whether the publisher chose each id."""

    ids: list[str]
    ids_b: list[bytes]
    points: npt.NDArray[np.float64]  # (n, k)
    bodies: list[bytes]
    client: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Chunk:
    """Rows of one publish call bound for one dimension of one matcher: an item of its lane."""

    dim: int
    batch: Outgoing
    idx: Rows  # rows of `batch`


def _packed(dim: int, chunks: list[_Chunk]) -> pb.PackedPart:
    """One dimension's messages of a call, from one or more chunks."""
    points = np.concatenate([c.batch.points[c.idx] for c in chunks]) if len(chunks) > 1 \
        else chunks[0].batch.points[chunks[0].idx]
    ids: list[bytes] = []
    bodies: list[bytes] = []
    client: list[npt.NDArray[np.bool_]] = []
    for c in chunks:
        rows = c.idx.tolist()
        ids_b, bs = c.batch.ids_b, c.batch.bodies
        ids += [ids_b[i] for i in rows]
        bodies += [bs[i] for i in rows]
        client.append(c.batch.client[c.idx])
    return encode_part(dim, points, ids, bodies, np.concatenate(client))


@dataclass
class _Tries:
    """One publish call's messages: attempts so far, re-ranks after a stale table, and whether a
    candidate refused for backpressure or failed on the store (the 503 says which)."""

    attempt: Rows  # per message
    reranks: Rows
    store_failed: bool = False
    refused: bool = False


@dataclass
class _Round:
    """What one round of Forward calls left: rows to retry, stale ones, members to blame, failures."""

    retry: list[Rows] = field(default_factory=list)
    stale: list[tuple[Rows, str]] = field(default_factory=list)  # (rows, the member that refused them)
    blamed: set[str] = field(default_factory=set)
    failed: dict[tuple[str, int, grpc.StatusCode | str], int] = field(default_factory=dict)  # messages, by why


# a chunk handed to its lane: (member, dimension, rows, the futures of its pieces)
_Sent = tuple[str, int, Rows, list[asyncio.Future[Answer]]]


class Forwarder:
    """Sends published messages on to matchers: a lane per matcher, failover, backpressure, counts."""

    def __init__(self, settings: DispatcherSettings, cluster: Routing, space: str = "") -> None:
        self.s = settings
        self.cluster = cluster  # the space's routing: the cluster view, or a named space's view
        self.space = space  # named in every Forward call ("": the default space)
        self._lanes: dict[str, Batcher[_Chunk, bool]] = {}
        self._streams: dict[str, ForwardStream] = {}  # matcher -> its calls' open stream
        self.failovers = 0
        self.calls = 0  # Forward calls made, and the messages they carried
        self.forwarded = 0
        self.outstanding = 0  # messages of publish calls under way (backpressure bound)
        self.refused = 0  # publish calls refused by backpressure: ours, or every candidate's

    async def close(self) -> None:
        """End the open streams to the matchers."""
        await asyncio.gather(*(s.close() for s in self._streams.values()))

    def counts(self) -> tuple[int, int, int, int]:
        """(failovers, Forward calls, messages they carried, publish calls refused by backpressure)
        since the start, for the metrics."""
        return self.failovers, self.calls, self.forwarded, self.refused

    def _submit(self, member: str, dim: int, batch: Outgoing, idx: Rows) -> list[asyncio.Future[Answer]]:
        """Queue rows `idx` of `batch` along `dim` in `member`'s lane, in pieces of at most
        forward_batch_max: each piece's future.

        The lane is a `Batcher` whose items are chunks, each weighing its messages: a call
        carries up to forward_batch_max messages, at most forward_inflight calls are under way,
        and while one is, a further call goes out alongside only once half a call's worth
        waits. A call costs the dispatcher ~200 µs of CPU in grpc.aio whatever it carries, and
        the matcher more than a message does: sending every publish's chunk on its own call as
        soon as a slot was free made twice the calls, each half as full (docs/benchmarks.md,
        "Publish")."""
        most = self.s.forward_batch_max
        lane = self._lanes.get(member)
        if lane is None:
            lane = self._lanes[member] = Batcher(partial(self._forward, member), most, self.s.forward_inflight,
                                                 alongside=most // 2)
        pieces = [idx[at:at + most] for at in range(0, len(idx), most)]
        return [lane.submit(_Chunk(dim, batch, piece), weight=len(piece)) for piece in pieces]

    async def _forward(self, member: str, chunks: list[_Chunk]) -> list[bool]:
        """One call of `member`'s lane: its chunks' messages, one packed part per dimension."""
        by_dim: dict[int, list[_Chunk]] = {}
        for c in chunks:
            by_dim.setdefault(c.dim, []).append(c)
        table = self.cluster.table
        assert table is not None  # publish refuses a call before the first table, and a table is only replaced
        req = pb.ForwardRequest(epoch=table.epoch, packed=[_packed(dim, cs) for dim, cs in by_dim.items()],
                                space=self.space)
        self.calls += 1
        self.forwarded += sum(len(c.idx) for c in chunks)
        stream = self._streams.get(member)
        if stream is None:
            stream = self._streams[member] = ForwardStream(lambda: self.cluster.stub(member))
        await stream.forward(req, self.s.forward_timeout_s)
        self.cluster.mark_up(member)  # it answers again: no backoff left from past failures
        return [True] * len(chunks)

    def refuse(self) -> None:
        """Backpressure at the dispatcher: 503 for a publish call, nothing of it forwarded."""
        self.refused += 1
        raise unavailable(f"the dispatcher has {self.outstanding} messages under way (bound "
                          f"{self.s.max_outstanding}); retry later")

    def full(self) -> bool:
        """At the bound already: a publish can be refused before its body is even decoded."""
        return self.outstanding >= self.s.max_outstanding

    async def publish(self, batch: Outgoing) -> None:
        """Match and store every message; raises ApiError(503) if one cannot be placed.

        Backpressure: a call that would take the messages under way past `max_outstanding`
        is refused at once, whole (nothing is forwarded); so is a message every candidate
        refused because its input queue is over its bound (RESOURCE_EXHAUSTED)."""
        if self.cluster.table is None:
            raise unavailable("no segment table yet: the cluster is starting")
        n = len(batch)
        if self.outstanding and self.outstanding + n > self.s.max_outstanding:
            self.refuse()
        self.outstanding += n
        try:
            await self._publish(batch, n)
        finally:
            self.outstanding -= n

    async def _publish(self, batch: Outgoing, n: int) -> None:
        """Rounds of Forward calls: each message to its next candidate until every one is stored."""
        ranking = self.cluster.rank_batch(batch.points, time.monotonic())
        tries = _Tries(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
        pending = np.arange(n)
        while pending.size:
            if (tries.attempt[pending] >= ranking.count[pending]).any():
                self._give_up(tries)
            chunks = self._send(ranking, batch, pending, tries.attempt)
            results = await asyncio.gather(*(f for c in chunks for f in c[3]))
            out = self._sort_results(chunks, results, ranking, tries)
            for member in out.blamed:  # one failure per failed call, not one per message it carried
                self.cluster.mark_down(member)
            if out.stale:  # one table pull for the whole round, however many messages it concerns,
                # from a matcher that refused: it has adopted a newer table than ours
                await self.cluster.pull_table(out.stale[0][1])
                rows = np.concatenate([r for r, _ in out.stale])
                ranking = ranking.replace(rows, self.cluster.rank_batch(batch.points[rows], time.monotonic()))
                tries.attempt[rows] = 0
            for (member, d, why), k in out.failed.items():
                self.failovers += k
                log.warning("forward of %d message(s) to %s dim %d failed (%s); trying the next candidate",
                            k, member, d, why)
            pending = np.sort(np.concatenate(out.retry)) if out.retry else pending[:0]

    def _give_up(self, tries: _Tries) -> None:
        """A message has no candidate left: 503, saying why the candidates failed."""
        if tries.refused:
            self.refused += 1
            raise unavailable("every candidate matcher is over its input bound (backpressure); retry later "
                              "with the same id")
        if tries.store_failed:
            raise unavailable("the store is unreachable; retry with the same id")
        raise unavailable("no candidate matcher could take the message; retry with the same id")

    def _send(self, ranking: Ranking, batch: Outgoing, pending: Rows, attempt: Rows) -> list[_Sent]:
        """The pending messages grouped by their current choice, each group handed to its
        matcher's lane: [(member, dimension, rows, futures)]."""
        mem, dim = ranking.choice(pending, attempt[pending])
        chunks: list[_Sent] = []
        key = mem * (int(dim.max()) + 1) + dim
        by_key = np.argsort(key, kind="stable")
        cuts = np.flatnonzero(np.diff(key[by_key])) + 1
        for rows in np.split(by_key, cuts):
            member, d = ranking.members[mem[rows[0]]], int(dim[rows[0]])
            idx = pending[rows]
            chunks.append((member, d, idx, self._submit(member, d, batch, idx)))
        return chunks

    def _sort_results(self, chunks: list[_Sent], results: list[Answer], ranking: Ranking, tries: _Tries) -> _Round:
        """What a round's answers leave to do: the rows to send again (to their next candidate,
        or re-ranked when the matcher no longer owns their values), whom to mark down, and why."""
        out = _Round()
        at = 0
        most = self.s.forward_batch_max
        for member, d, idx, futs in chunks:
            for piece, res in zip(range(0, len(idx), most), results[at:at + len(futs)]):
                if res is True:
                    continue
                rows = idx[piece:piece + most]
                code = res.code() if isinstance(res, grpc.aio.AioRpcError) else None
                fresh = rows[tries.reranks[rows] < 3] if code == grpc.StatusCode.FAILED_PRECONDITION else rows[:0]
                if fresh.size:
                    # The matcher no longer owns the values: re-rank on a fresh table (the caller).
                    tries.reranks[fresh] += 1
                    out.stale.append((fresh, member))
                moved = np.setdiff1d(rows, fresh, assume_unique=True) if fresh.size else rows
                if moved.size:
                    if code == grpc.StatusCode.ABORTED:
                        # The matcher is fine but could not write to the store: try another, blame none.
                        tries.store_failed = True
                    elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        # The matcher is fine but over its input bound: try another, blame none.
                        tries.refused = True
                    else:
                        out.blamed.add(member)
                    tries.attempt[moved] += 1
                    self._charge_next(ranking, moved, tries.attempt)
                why = (member, d, code or type(res).__name__)
                out.failed[why] = out.failed.get(why, 0) + len(rows)
                out.retry.append(rows)
            at += len(futs)
        return out

    def _charge_next(self, ranking: Ranking, rows: Rows, attempt: Rows) -> None:
        """The messages go on to their next candidates: count them there (the adaptive estimate)."""
        for i in rows.tolist():
            if attempt[i] < ranking.count[i]:
                j = ranking.order[i, attempt[i]]
                self.cluster.charge((int(ranking.cand_d[i, j]), ranking.members[ranking.cand_m[i, j]]))
