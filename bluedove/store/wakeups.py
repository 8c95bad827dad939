"""Wake-ups: a process's parked long polls woken by one Redis connection, not one each.

Every write of deliveries (the DELIVER and DEAD_LETTER scripts, bluedove/store/scripts.py)
ends with one PUBLISH on the channel `keys.WAKE`, naming the queue streams it wrote to. A
process that serves polls subscribes to that channel once, on one connection, and keeps its
parked polls in a table by queue; a wake-up message wakes every poll parked on
a stream it names, and those polls then read their queue (the POLL script, a short call on
the shared pool). Nothing else is held while a poll waits: a thousand parked polls cost a
thousand table entries, no connection and no Redis work.

A wake-up can be missed: the subscription was down, or being made, when the write happened.
So every parked poll is woken whenever the subscription (re)starts, and while it is down
parked polls look at their queues every second on their own (`live` is False). On a Redis
Cluster the channel is the cluster's (PUBLISH reaches every node's subscribers), so one
connection to any node hears every write; when that node fails, the next is tried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from bluedove.store import keys as K
from bluedove.store.client import RedisClient

log = logging.getLogger("bluedove.store")

# The wait before subscribing again after the subscription failed, doubling up to the cap.
RETRY_S, RETRY_CAP_S = 0.2, 5.0
# How long the subscription may be quiet before it is asked whether it is still there.
HEALTH_S = 15.0
# How long closing waits for the subscription's task to end.
CLOSE_S = 2.0


class Waiter(Protocol):
    """A parked poll, as the table sees it (bluedove/store/waiting.py's PollWait)."""

    def wake(self) -> None: ...


class Wakeups:
    """The wake-up subscription of one process and its parked polls, by queue stream key.

    `connect` makes a client for the subscription: a new one each time it (re)starts (on a
    cluster, each try goes to the next node). The subscription starts with the first parked
    poll and runs until `close`."""

    def __init__(self, connect: Callable[[int], RedisClient]) -> None:
        self._connect = connect
        self._parked: dict[str, set[Waiter]] = {}
        self._task: asyncio.Task[None] | None = None
        self.live = False  # subscribed: parked polls may wait for their wake-up alone
        self.received = 0  # wake-up messages heard (the metrics)
        self._stops: dict[int, asyncio.Task[None]] = {}
        self._closed = False
        self._conn: Any = None  # the subscription's connection, while there is one

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def parked(self) -> int:
        return sum(len(s) for s in self._parked.values())

    def park(self, stream: str, p: Waiter) -> None:
        """`p`, a poll on `stream`, is woken by the wake-ups that name it until `unpark`."""
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._run(), name="wakeups")
        self._parked.setdefault(stream, set()).add(p)

    def unpark(self, stream: str, p: Waiter) -> None:
        waiting = self._parked.get(stream)
        if waiting is not None:
            waiting.discard(p)
            if not waiting:
                del self._parked[stream]

    def stop_on(self, stop: asyncio.Event) -> None:
        """When `stop` is set, every parked poll looks at its queue again (and, seeing `stop`,
        answers): one task per event, however many polls pass it."""
        if id(stop) not in self._stops:
            self._stops[id(stop)] = asyncio.create_task(self._wake_on(stop), name="wakeups-stop")

    async def _wake_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.wake_all()

    def wake(self, streams: str) -> None:
        """Wake the polls parked on the streams named in a wake-up message (space-separated).
        (A poll woken may end, and leave the table, while it is woken: hence the copies.)"""
        parked = self._parked
        if not parked:
            return
        for stream in streams.split(" "):
            waiting = parked.get(stream)
            if waiting is not None:
                for p in tuple(waiting):
                    p.wake()

    def wake_all(self) -> None:
        """Every parked poll looks at its queue again (a wake-up may have been missed; or the
        process is stopping and its polls should answer now)."""
        for waiting in list(self._parked.values()):
            for p in tuple(waiting):
                p.wake()

    async def close(self) -> None:
        # A cancel can be lost inside redis-py's reads (a reply landing in the same loop
        # turn): the connection is also closed under the reader, and `_closed` ends the loop.
        self._closed = True
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)
        tasks = [t for t in (self._task, *self._stops.values()) if t is not None]
        self._task, self._stops = None, {}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_S)
        self.live = False
        self.wake_all()

    async def _run(self) -> None:
        attempt, delay = 0, RETRY_S
        while not self._closed:
            try:
                await self._listen(self._connect(attempt))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: polls fall back to looking every second
                if not self.closed:
                    log.warning("wake-up subscription lost, subscribing again in %.1f s: %r", delay, exc)
            self.live = False
            self.wake_all()
            if self.closed:
                return
            await asyncio.sleep(delay)
            attempt, delay = attempt + 1, min(delay * 2, RETRY_CAP_S)

    async def _listen(self, client: RedisClient) -> None:
        """Subscribe on a connection of our own (redis-py's PubSub can swallow a cancel and
        hang its close) and hear wake-ups until it fails. A quiet connection is asked PING
        every HEALTH_S; a PING left unanswered that long means it is gone."""
        conn = self._conn = client.connection_pool.make_connection()
        pinged = False
        try:
            await conn.connect()
            await conn.send_command("SUBSCRIBE", K.WAKE)
            while not self.closed:
                msg = await conn.read_response(timeout=HEALTH_S, push_request=True)
                if msg is None:
                    if pinged:
                        raise ConnectionError("the wake-up subscription answers no PING")
                    await conn.send_command("PING")
                    pinged = True
                    continue
                pinged = False
                kind = msg[0]
                if kind == "message":
                    self.received += 1
                    self.wake(msg[2])
                elif kind == "subscribe":  # confirmed: from now on no write goes unheard
                    self.live = True
                    self.wake_all()  # what was written before it
        finally:
            self.live = False
            self._conn = None
            await conn.disconnect(nowait=True)
            await client.aclose()
