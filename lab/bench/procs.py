"""Load processes of the delivery bench: publishers (PublishStream), feeders (the matchers' Forward) and pollers
(lab.load over REST, max=100)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

import numpy as np

from lab.load import Pacer, poll_queues

# Publisher pace (messages/s per process): PAUSED stops sending, FULL sends as fast as it can.
PAUSED = -1.0
FULL = 0.0
STREAM_CHUNK = 500  # messages per PublishStream call


@dataclass
class Control:
    """Shared between the bench and one load process (multiprocessing primitives)."""

    rate: object  # Value('d'): publishers' pace, PAUSED, FULL or messages/s
    done: object  # Value('q'): messages stored (publisher) or deliveries acked (poller)
    active: object  # Value('i'): pollers poll while 1
    stop: object  # Event: finish (pollers drain their queues first when `drain` is set)
    drain: object  # Event
    ready: object  # Value('i'): processes of this kind that have started and connected
    polls: object = None  # Value('q'): polls made (pollers only)


def _ready(ctl: Control) -> None:
    with ctl.ready.get_lock():
        ctl.ready.value += 1


# -- publishers --------------------------------------------------------------------------------
def publisher_main(target: str, names: list[str], seed: int, index: int, ctl: Control, results) -> None:
    """Stream uniform messages to the PubSub gRPC API at the pace `ctl.rate` asks for; at the
    end send back (ids, points) of every message the service accepted."""
    import grpc

    from bluedove.v1 import pubsub_pb2 as pb
    from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

    rng = np.random.default_rng([seed, 100, index])
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    pacer = Pacer()
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.PubSubStub(channel)
        _ready(ctl)
        while not ctl.stop.is_set():
            rate = ctl.rate.value
            if rate == PAUSED:
                pacer.wait_s(0.0, 0, time.monotonic())  # a pause ends the schedule
                time.sleep(0.02)
                continue
            pts = rng.uniform(0.0, 1000.0, (STREAM_CHUNK, len(names)))
            msgs = [pb.Message(attributes=dict(zip(names, row)), payload=f'{{"n":{len(ids) + j}}}')
                    for j, row in enumerate(pts.tolist())]
            try:
                reply = stub.PublishStream(iter(msgs), timeout=60)
            except grpc.RpcError as exc:
                error = f"PublishStream failed: {exc.code().name} {exc.details()}"
                break
            ids += reply.ids
            points.append(pts)
            with ctl.done.get_lock():
                ctl.done.value += len(reply.ids)
            time.sleep(pacer.wait_s(rate, STREAM_CHUNK, time.monotonic()))  # paced, or FULL: at once
    results.put(("publisher", index, {"ids": ids, "points": np.vstack(points) if points else None, "error": error}))


# -- feeders: the dispatchers' one hop, without the public API -------------------------------
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


async def _feed(table_json: dict, seed: int, index: int, ctl: Control, inflight: int, prebuild: int) -> dict:
    import collections

    import grpc

    from bluedove.segments import SegmentTable
    from bluedove.v1 import matcher_pb2 as pb

    table = SegmentTable.from_json(table_json)
    names = list(table.space.names)
    k = len(names)
    # The stored message JSON, {id, attributes, payload, published_at}, by formatting rather than
    # json.dumps of a dict per message (most of a feeder's CPU): ids and the timestamp need no
    # escaping, and a float's repr is JSON (json.dumps writes the same text).
    template = ('{"id":"%s","attributes":{' + ",".join(f"{json.dumps(n)}:%r" for n in names)
                + '},"payload":{"n":%d},"published_at":"%s"}')
    rng = np.random.default_rng([seed, 300, index])
    prefix = f"f{index}-{os.getpid()}-"
    channels = {m: grpc.aio.insecure_channel(a) for m, a in table.members.items()}
    # Requests go out already serialized (the pool's), so the call takes bytes as they are.
    forward = {m: ch.unary_unary("/bluedove.v1.Matcher/Forward", request_serializer=None,
                                 response_deserializer=pb.ForwardReply.FromString) for m, ch in channels.items()}
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    sem = asyncio.Semaphore(inflight)
    tasks: set[asyncio.Task] = set()
    seq = 0
    built_live = 0

    def chunk() -> tuple[list[str], np.ndarray, dict[str, bytes]]:
        """STREAM_CHUNK messages as one serialized request per matcher, one part per dimension
        (a dispatcher's lane)."""
        nonlocal seq
        pts = rng.uniform(0.0, 1000.0, (STREAM_CHUNK, k))
        groups: dict[str, dict[int, list]] = {}
        mids = []
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for row in pts.tolist():
            mid = f"{prefix}{seq:x}"
            d = seq % k
            seq += 1
            body = (template % (mid, *row, seq, now)).encode()
            groups.setdefault(table.owner_at(d, row[d]), {}).setdefault(d, []).append(
                pb.ForwardMessage(id=mid, point=row, body=body, client_id=False))
            mids.append(mid)
        reqs = {}
        for m, by_dim in groups.items():
            (d, msgs), *more = by_dim.items()
            reqs[m] = pb.ForwardRequest(dimension=d, messages=msgs, epoch=table.epoch, parts=[
                pb.ForwardPart(dimension=d2, messages=ms) for d2, ms in more]).SerializeToString()
        return mids, pts, reqs

    pool = collections.deque(chunk() for _ in range(-(-prebuild // STREAM_CHUNK)))
    _ready(ctl)

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
        if pool:
            mids, pts, reqs = pool.popleft()
        else:
            mids, pts, reqs = chunk()
            if rate == FULL:  # a phase at full speed that waited on building
                built_live += len(mids)
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


# -- pollers -----------------------------------------------------------------------------------
def poller_main(url: str, queues: list[tuple[str, str]], sample: set[str], concurrency: int, ctl: Control,
                results, interval: float = 0.0) -> None:
    """Poll (max=100, no wait) and ack `queues` with `concurrency` connections while
    `ctl.active`, each connection polling each of its queues once per `interval` seconds (0:
    as fast as it can); on `stop` with `drain`, empty them first, unpaced. Sends back the
    sampled deliveries."""
    async def main() -> dict:
        _ready(ctl)  # the pools connect on their first request
        return await poll_queues(url, queues, _Switches(ctl), concurrency, interval, sample)

    results.put(("poller", os.getpid(), asyncio.run(main())))


class _Switches:
    """A poller process's Control as the pollers' switches (lab.load.Switches)."""

    def __init__(self, ctl: Control) -> None:
        self.ctl = ctl

    def active(self) -> bool:
        return bool(self.ctl.active.value)

    def stopping(self) -> bool:
        return self.ctl.stop.is_set()

    def draining(self) -> bool:
        return self.ctl.drain.is_set()

    def polled(self) -> None:
        with self.ctl.polls.get_lock():
            self.ctl.polls.value += 1

    def acked(self, n: int) -> None:
        with self.ctl.done.get_lock():
            self.ctl.done.value += n
