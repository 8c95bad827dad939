"""Hand-off between matchers: a taker builds its grown sets from the rows the old owners
export (each current to a catalogue log position) plus its own, replays the log from the
oldest of those positions, and swaps the sets in; an old owner exports the rows of a range."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

import grpc
import numpy as np

from bluedove.core.partition.segments import SegmentTable
from bluedove.matcher.sets import SubscriptionSets
from bluedove.matcher.sets_owner import Fill, Rebuilt
from bluedove.runtime import tls
from bluedove.v1 import matcher_pb2 as pb
from bluedove.v1 import matcher_pb2_grpc as pb_grpc

log = logging.getLogger("bluedove.matcher")


class Sets(Protocol):
    """What the hand-off needs of the owner of the subscription sets (`SetsOwner`)."""

    async def rebuild(self, table: SegmentTable, fill: Fill, since: list[str], uses_old: bool = False) -> Rebuilt:
        ...

    async def export(self, dim: int, low: float, high: float
                     ) -> tuple[str, list[str], list[str], np.ndarray, np.ndarray, dict[str, Any]]:
        ...


async def load_from_owners(sets: Sets, table: SegmentTable, sources: Sequence[pb.Source], timeout_s: float,
                           tls_files: tls.TlsFiles | None = None, space: str = "") -> None:
    """Build the sets of the dimensions that grow from our own rows plus the rows the old
    owners export (each current to its log position), keep the other sets as they are,
    then replay the catalogue log from the oldest of those positions and swap."""
    k = table.space.k
    channels: dict[str, grpc.aio.Channel] = {}

    async def fetch(src: pb.Source) -> tuple[int, pb.ExportReply]:
        ch = channels.get(src.address) or channels.setdefault(src.address, tls.aio_channel(src.address, tls_files))
        r = await pb_grpc.MatcherStub(ch).Export(
            pb.ExportRequest(dimension=src.dimension, low=src.low, high=src.high, space=space), timeout=timeout_s)
        return src.dimension, r

    t0 = time.monotonic()
    try:
        fetched = await asyncio.gather(*(fetch(src) for src in sources))
    finally:
        for ch in channels.values():
            await ch.close(grace=None)
    fetch_s = time.monotonic() - t0
    grown = {d for d, _ in fetched}

    def build(new: SubscriptionSets, old: SubscriptionSets | None) -> None:
        assert old is not None, "a hand-off grows the sets of a started matcher"
        for _, r in fetched:
            if r.filters:  # the filters of the rows that are their boxes, before the rows
                new.book.learn_all(json.loads(r.filters))
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

    done = await sets.rebuild(table, build, [r.log_pos for _, r in fetched], uses_old=True)
    log.info("hand-off from %s: %d rows fetched in %.2f s, sets built in %.2f s, %d log changes replayed "
             "in %.2f s", sorted({src.member for src in sources}), sum(r.count for _, r in fetched), fetch_s,
             done.build_s, done.replayed, done.replay_s)


async def export(sets: Sets, req: pb.ExportRequest) -> pb.ExportReply:
    """The rows of one dimension's set that overlap [low, high), packed, with the catalogue
    log position they are current to."""
    pos, ids, queues, lows, highs, filters = await sets.export(req.dimension, req.low, req.high)
    return pb.ExportReply(log_pos=pos, ids="\n".join(ids), queues="\n".join(queues), count=len(ids),
                          lows=np.ascontiguousarray(lows, dtype="<f8").tobytes(),
                          highs=np.ascontiguousarray(highs, dtype="<f8").tobytes(),
                          filters=json.dumps(filters, separators=(",", ":")) if filters else "")
