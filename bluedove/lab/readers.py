"""Subscribers over REST: a workload's subscriptions made, and phone-like readers that long-poll
their queues and ack in batches, as the demo's drivers read theirs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from bluedove.client.http import AsyncHttpTransport
from bluedove.lab.load import POLL_MAX, REAL, Clock, pool


async def subscribe_workload(transport: AsyncHttpTransport, w, concurrency: int = 16) -> tuple[list[str], dict]:
    """Every subscription of workload `w` through the REST API, `concurrency` at a time: the
    first of each of its queues creates the queue (its answer carries the token), the queue's
    others follow into it. (subscription ids in the workload's order, {workload queue: (queue,
    token)}); an error answer raises (bluedove.client.BlueDoveError)."""
    groups: dict[int, list[int]] = {}
    for j, q in enumerate(w.queue_of.tolist()):
        groups.setdefault(q, []).append(j)
    sub_ids = [""] * w.n_subs
    queues: dict[int, tuple[str, str]] = {}
    sem = asyncio.Semaphore(concurrency)

    async def subscribe(j: int, queue: str | None, token: str | None) -> dict:
        async with sem:
            body = {"predicates": w.predicates(j)} | ({"queue": queue} if queue else {})
            out = await transport.subscribe(body, token)
        sub_ids[j] = out["id"]
        return out

    async def one_queue(q: int, js: list[int]) -> None:
        first = await subscribe(js[0], None, None)
        queues[q] = (first["queue"], first["token"])
        await asyncio.gather(*(subscribe(j, first["queue"], first["token"]) for j in js[1:]))

    await asyncio.gather(*(one_queue(q, js) for q, js in groups.items()))
    return sub_ids, queues


# -- phones: queues long-polled and acked in batches, as the demo's drivers read theirs ----------
LONG_POLL_S = 10.0  # a reader serving one queue long-polls this long; one serving several, wait=0
# A queue is polled again at most this often after a poll that brought something, so that
# deliveries arriving close together share one request (the client shares the CPU).
MIN_POLL_GAP_S = 0.5
ACK_EVERY_S = 5.0  # receipts are acked in batches at most this often per queue (visibility: 30 s)
IDLE_ROUND_S = 2.0  # a reader serving several queues goes round them at most this often while empty
MAX_READERS = 400  # concurrent reader tasks (each a long-poll connection)
READERS_PER_POOL = 4


@dataclass
class Inbox:
    """A queue a reader serves, with the receipts it has yet to ack."""

    queue: str
    token: str
    pending_acks: list[str] = field(default_factory=list)
    last_ack: float = 0.0


async def _ack_pending(transport: AsyncHttpTransport, box: Inbox, now: float) -> None:
    receipts, box.pending_acks, box.last_ack = box.pending_acks, [], now
    try:
        await transport.ack(box.queue, box.token, receipts)
    except BaseException:
        box.pending_acks = receipts + box.pending_acks  # try again next round
        raise


async def read(transport: AsyncHttpTransport, boxes: list[Inbox], mine: list[int],
               received: Callable[[int, list[dict]], None], failed: Callable[[Exception], None],
               clock: Clock = REAL, min_gap_s: float = MIN_POLL_GAP_S,
               polling: Callable[[int], None] | None = None) -> None:
    """Serve the inboxes `mine` until cancelled: poll (a long-poll when alone, waking in time to
    ack what is pending), hand each poll's deliveries to `received(index, deliveries)`, ack in
    batches; a failed request goes to `failed` and is retried half a second later. After a
    poll that brought something, the next waits until `min_gap_s` after it began (0: at once,
    a long-poll always open, as a latency-minded subscriber keeps one). `polling(index)`, if
    given, is called as each poll is sent."""
    alone = len(mine) == 1
    while True:
        started = clock.now()
        got = 0
        for i in mine:
            box = boxes[i]
            try:
                if box.pending_acks and (started - box.last_ack >= ACK_EVERY_S or len(box.pending_acks) >= 500):
                    await _ack_pending(transport, box, started)
                wait = (ACK_EVERY_S if box.pending_acks else LONG_POLL_S) if alone else 0.0
                if polling is not None:
                    polling(i)
                msgs = await transport.poll(box.queue, box.token, POLL_MAX, wait)
                received(i, msgs)
                got += len(msgs)
                box.pending_acks += [m["receipt"] for m in msgs]
            except Exception as exc:  # noqa: BLE001 - a reader must outlive any one bad answer
                failed(exc)
                await clock.sleep(0.5)  # the cluster is busy or a process restarts: retry
        if got:
            await clock.sleep(max(0.0, started + min_gap_s - clock.now()))
        elif not alone:
            await clock.sleep(max(0.0, started + IDLE_ROUND_S - clock.now()))


@asynccontextmanager
async def reading(url: str, boxes: list[Inbox], received: Callable[[int, list[dict]], None],
                  failed: Callable[[Exception], None], transport: httpx.AsyncBaseTransport | None = None,
                  clock: Clock = REAL, min_gap_s: float = MIN_POLL_GAP_S,
                  polling: Callable[[int], None] | None = None) -> AsyncIterator[list[asyncio.Task]]:
    """Reader tasks for every inbox (at most MAX_READERS, in pools of READERS_PER_POOL) while
    the block runs (`read`'s `min_gap_s` and `polling`); cancelled and their connections closed after it."""
    n = min(len(boxes), MAX_READERS)
    pools: list[AsyncHttpTransport] = []
    tasks: list[asyncio.Task] = []
    try:
        for k in range(n):
            if k % READERS_PER_POOL == 0:
                pools.append(pool(url, READERS_PER_POOL + 1, transport, timeout_s=LONG_POLL_S + 20))
            mine = list(range(k, len(boxes), n))
            tasks.append(asyncio.create_task(read(pools[-1], boxes, mine, received, failed, clock, min_gap_s, polling),
                                             name=f"reader{k}"))
        yield tasks
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in pools:
            await p.close()
