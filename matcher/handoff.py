"""Hand-off between matchers: a taker builds its grown sets from the rows the old owners
export (each current to a catalogue log position) plus its own, replays the log from the
oldest of those positions, and swaps the sets in; an old owner exports the rows of a range."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING

import grpc
import numpy as np

from bluedove.segments import SegmentTable
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc
from matcher.catalog import SubscriptionSets

if TYPE_CHECKING:
    from matcher.server import Matcher

log = logging.getLogger("bluedove.matcher")


async def load_from_owners(m: Matcher, table: SegmentTable, sources) -> None:
    """Build the sets of the dimensions that grow from our own rows plus the rows the old
    owners export (each current to its log position), keep the other sets as they are,
    then replay the catalogue log from the oldest of those positions (adds and removes
    are idempotent, so replaying what a set already has changes nothing) and swap."""
    k = table.space.k
    channels = {}

    async def fetch(src):
        ch = channels.get(src.address) or channels.setdefault(src.address, grpc.aio.insecure_channel(src.address))
        r = await pb_grpc.MatcherStub(ch).Export(
            pb.ExportRequest(dimension=src.dimension, low=src.low, high=src.high), timeout=30.0)
        return src.dimension, r

    t0 = time.monotonic()
    try:
        fetched = await asyncio.gather(*(fetch(src) for src in sources))
    finally:
        for ch in channels.values():
            await ch.close()
    t1 = time.monotonic()
    async with m.log_lock:
        old = m.sets
        new = SubscriptionSets(m.s.id, table, m.s.tombstone_ttl_s, m.s.partition)
        new._tombstones = dict(old._tombstones)
        grown = {d for d, _ in fetched}
        positions = [m.log_pos] + [r.log_pos for _, r in fetched]

        def build() -> None:
            for i in range(k):
                if i not in grown:
                    new.sets[i] = old.sets[i]
                    continue
                ids, queues, lows, highs = old.sets[i].export(i, -math.inf, math.inf)
                lows_l, highs_l = [lows], [highs]
                ids, queues = list(ids), list(queues)
                for d, r in fetched:
                    if d == i and r.count:
                        ids += r.ids.split("\n")
                        queues += r.queues.split("\n")
                        lows_l.append(np.frombuffer(r.lows, dtype="<f8").reshape(-1, k))
                        highs_l.append(np.frombuffer(r.highs, dtype="<f8").reshape(-1, k))
                new.add_rows(ids, queues, np.concatenate(lows_l), np.concatenate(highs_l), dims={i})

        await m.run_index(build)
        t2 = time.monotonic()
        pos = min(positions, key=log_order)
        replayed = 0
        while changes := await m.store.catalogue_changes(pos):
            await m.run_index(m.applier(new, changes, table))
            pos = changes[-1][0]
            replayed += len(changes)
        m.sets, m.log_pos = new, max(pos, m.log_pos, key=log_order)
    log.info("hand-off from %s: %d rows fetched in %.2f s, sets built in %.2f s, %d log changes replayed "
             "in %.2f s", sorted({src.member for src in sources}), sum(r.count for _, r in fetched), t1 - t0,
             t2 - t1, replayed, time.monotonic() - t2)


async def export(m: Matcher, req: pb.ExportRequest) -> pb.ExportReply:
    """The rows of one dimension's set that overlap [low, high), packed, with the catalogue
    log position they are current to."""
    async with m.log_lock:  # the rows and the position must agree
        pos = m.log_pos
        ids, queues, lows, highs = await m.run_index(m.sets.sets[req.dimension].export,
                                                     req.dimension, req.low, req.high)
    return pb.ExportReply(log_pos=pos, ids="\n".join(ids), queues="\n".join(queues), count=len(ids),
                          lows=np.ascontiguousarray(lows, dtype="<f8").tobytes(),
                          highs=np.ascontiguousarray(highs, dtype="<f8").tobytes())


def log_order(pos: str) -> tuple[int, int]:
    """A Redis stream id ("ms-seq") as a sortable pair."""
    ms, _, seq = pos.partition("-")
    return int(ms), int(seq or 0)
