"""Feeders of the delivery bench: the dispatchers' one hop without the public API, straight to
the matchers' Forward at the pace the bench asks for."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time

import grpc
import numpy as np

from bluedove.core.partition.segments import SegmentTable
from bluedove.lab.bench.procs import FULL, PAUSED, STREAM_CHUNK, Control, mark_ready
from bluedove.lab.load import Pacer
from bluedove.runtime import tls
from bluedove.v1 import matcher_pb2 as pb


def feeder_main(table_json: dict, seed: int, index: int, ctl: Control, results, inflight: int = 4,
                prebuild: int = 0) -> None:
    """Send uniform messages straight to the matchers' Forward (as a dispatcher does: one
    candidate per message, here each dimension's owner in turn), at the pace `ctl.rate` asks
    for; at the end send back (ids, points) of every message the matchers stored.

    The first `prebuild` messages are built and serialized before the feeder reports ready, as
    a load generator prepares its requests: while they last, the feeder's CPU goes to sending
    only and the machine's to the matchers and Redis under test. Past them it builds as it sends."""
    out = asyncio.run(_feed(table_json, seed, index, ctl, inflight, prebuild))
    results.put(("feeder", index, out))


class _Chunks:
    """Uniform messages, STREAM_CHUNK at a time, as one serialized request per matcher, one
    part per dimension (a dispatcher's lane): each dimension's owner in turn is the candidate."""

    def __init__(self, table: SegmentTable, seed: int, index: int) -> None:
        self.table = table
        self.k = len(table.space.names)
        # The stored message JSON, {id, attributes, payload, published_at}, by formatting rather
        # than json.dumps of a dict per message (most of a feeder's CPU): ids and the timestamp
        # need no escaping, and a float's repr is JSON (json.dumps writes the same text).
        self.template = ('{"id":"%s","attributes":{' + ",".join(f"{json.dumps(n)}:%r" for n in table.space.names)
                         + '},"payload":{"n":%d},"published_at":"%s"}')
        self.rng = np.random.default_rng([seed, 300, index])
        self.prefix = f"f{index}-{os.getpid()}-"
        self.seq = 0

    def next(self) -> tuple[list[str], np.ndarray, dict[str, bytes]]:
        """(message ids, points, {matcher: serialized ForwardRequest})."""
        pts = self.rng.uniform(0.0, 1000.0, (STREAM_CHUNK, self.k))
        groups: dict[str, dict[int, list]] = {}
        mids = []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for row in pts.tolist():
            mid = f"{self.prefix}{self.seq:x}"
            d = self.seq % self.k
            self.seq += 1
            body = (self.template % (mid, *row, self.seq, now)).encode()
            groups.setdefault(self.table.owner_at(d, row[d]), {}).setdefault(d, []).append(
                pb.ForwardMessage(id=mid, point=row, body=body, client_id=False))
            mids.append(mid)
        reqs = {}
        for m, by_dim in groups.items():
            (d, msgs), *more = by_dim.items()
            reqs[m] = pb.ForwardRequest(dimension=d, messages=msgs, epoch=self.table.epoch, parts=[
                pb.ForwardPart(dimension=d2, messages=ms) for d2, ms in more]).SerializeToString()
        return mids, pts, reqs


async def _feed(table_json: dict, seed: int, index: int, ctl: Control, inflight: int, prebuild: int) -> dict:
    table = SegmentTable.from_json(table_json)
    chunks = _Chunks(table, seed, index)
    channels = {m: tls.aio_channel(a, None) for m, a in table.members.items()}
    # Requests go out already serialized (the pool's), so the call takes bytes as they are.
    forward = {m: ch.unary_unary("/bluedove.v1.Matcher/Forward", request_serializer=None,
                                 response_deserializer=pb.ForwardReply.FromString) for m, ch in channels.items()}
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task] = set()
    built_live = 0
    pool = collections.deque(chunks.next() for _ in range(-(-prebuild // STREAM_CHUNK)))
    mark_ready(ctl)

    async def send(mids: list[str], pts: np.ndarray, reqs: dict[str, bytes]) -> None:
        nonlocal error
        try:
            await asyncio.gather(*(forward[m](body, timeout=60) for m, body in reqs.items()))
            ids.extend(mids)
            points.append(pts)
            with ctl.done.get_lock():
                ctl.done.value += len(mids)
        except grpc.aio.AioRpcError as exc:
            error = f"Forward failed: {exc.code().name} {exc.details()}"
        finally:
            sem.release()

    pacer = Pacer()
    while not ctl.stop.is_set() and error is None:
        rate = ctl.rate.value
        if rate == PAUSED:
            pacer.wait_s(0.0, 0, time.monotonic())  # a pause ends the schedule
            await asyncio.sleep(0.02)
            continue
        if not pool and rate == FULL:  # a phase at full speed that waited on building
            built_live += STREAM_CHUNK
        mids, pts, reqs = pool.popleft() if pool else chunks.next()
        await sem.acquire()
        task = asyncio.get_running_loop().create_task(send(mids, pts, reqs))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if (pause := pacer.wait_s(rate, len(mids), time.monotonic())) > 0:
            await asyncio.sleep(pause)
    await asyncio.gather(*tasks)
    for ch in channels.values():
        await ch.close()
    return {"ids": ids, "points": np.vstack(points) if points else None, "error": error, "built_live": built_live}
