"""Load processes of the delivery bench and what they share with it: publishers (PublishStream)
and pollers (bluedove.lab.load over REST, max=100); the feeders are in bluedove/lab/bench/feeder.py."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import numpy as np

from bluedove.lab.aio_transport import AioHttpTransport
from bluedove.lab.load import Pacer, poll_queues

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


def mark_ready(ctl: Control) -> None:
    with ctl.ready.get_lock():
        ctl.ready.value += 1


# -- publishers --------------------------------------------------------------------------------
def publisher_main(target: str, names: list[str], seed: int, index: int, ctl: Control, results) -> None:
    """Stream uniform messages to the PubSub gRPC API at the pace `ctl.rate` asks for; at the
    end send back (ids, points) of every message the service accepted."""
    import grpc

    from bluedove.client.grpc_transport import stream_elements
    from bluedove.runtime import tls
    from bluedove.v1 import pubsub_pb2 as pb
    from bluedove.v1 import pubsub_pb2_grpc as pb_grpc

    rng = np.random.default_rng([seed, 100, index])
    ids: list[str] = []
    points: list[np.ndarray] = []
    error = None
    pacer = Pacer()
    with tls.channel(target, None) as channel:
        stub = pb_grpc.PubSubStub(channel)
        mark_ready(ctl)
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
                reply = stub.PublishStream(stream_elements(msgs), timeout=60)
            except grpc.RpcError as exc:
                error = f"PublishStream failed: {exc.code().name} {exc.details()}"
                break
            ids += reply.ids
            points.append(pts)
            with ctl.done.get_lock():
                ctl.done.value += len(reply.ids)
            time.sleep(pacer.wait_s(rate, STREAM_CHUNK, time.monotonic()))  # paced, or FULL: at once
    results.put(("publisher", index, {"ids": ids, "points": np.vstack(points) if points else None, "error": error}))


# -- pollers -----------------------------------------------------------------------------------
def poller_main(url: str, queues: list[tuple[str, str]], sample: set[str], concurrency: int, ctl: Control,
                results, interval: float = 0.0) -> None:
    """Poll (max=100, no wait) and ack `queues` with `concurrency` connections while
    `ctl.active`, each connection polling each of its queues once per `interval` seconds (0:
    as fast as it can); on `stop` with `drain`, empty them first, unpaced. Sends back the
    sampled deliveries."""
    async def main() -> dict:
        mark_ready(ctl)  # the pools connect on their first request
        return await poll_queues(lambda n: AioHttpTransport(url, n), queues, _Switches(ctl), concurrency, interval,
                                 sample)

    results.put(("poller", os.getpid(), asyncio.run(main())))


class _Switches:
    """A poller process's Control as the pollers' switches (bluedove.lab.load.Switches)."""

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
