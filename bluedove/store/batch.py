"""Many script calls in one round trip, on one server or across a Redis Cluster's nodes, and
a delivery batch cut into one call per slot.

On one server a delivery batch is one call: the server checks no slots, and the calls go out
at once on a connection of the runner's own (`Runner._send_direct` says why). On a cluster
each call must keep to one slot, so the batch is cut by the slot of each delivery's queue; the
calls go out in one pipeline (redis-py sends each node its share at once). Either way each
node's calls are followed by a WAIT when the store promises replicated writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from bluedove.store import keys as K
from bluedove.store.client import RedisClient

# A script call's argument, as Redis takes it.
Arg = str | bytes | int | float


class NotReplicated(RedisError):
    """A write reached its primary but not the replicas the store waits for within the time
    allowed (Redis WAIT): it is not acknowledged, so the caller retries it. A RedisError like
    any other failure of the store: a matcher answers ABORTED (the store failed, not the
    matcher), so the dispatcher neither blames the matcher nor answers more than 503."""


class Script(Protocol):
    """A script as redis-py registers it: its text and its sha."""

    @property
    def script(self) -> str | bytes: ...

    @property
    def sha(self) -> str: ...


@dataclass
class Call:
    """One script call: the script's text and sha, its keys and args."""

    script: Script  # redis-py's Script
    keys: list[str]
    args: list[Arg]


# Deliveries in one DELIVER script at most. Redis runs a script alone: a batch of 500 messages
# to ~20 queues each was one call of ~10,000 deliveries, up to 63 ms in which no other command
# ran (a queue-token check, a catalogue write; a subscribe waited behind several under
# publishing). Each delivery has its own dedup mark, so a batch cut into calls and written
# again after a failure part way still writes each delivery once (docs/benchmarks.md,
# "Subscribe: single calls and batches").
DELIVER_MOST = 256
# One server's calls in flight on the runner's own connections at most; beyond, through the
# client's pool (a burst of calls never opens more than this many connections of its own).
DIRECT_MOST = 32


@dataclass
class SlotGroup:
    """One slot's deliveries of a batch, as a DELIVER call's keys and args."""

    messages: list[int] = field(default_factory=list)  # batch indices, in local order
    local: dict[int, int] = field(default_factory=dict)  # batch index -> 1-based local index
    keys: list[str] = field(default_factory=list)
    pairs: list[Arg] = field(default_factory=list)  # per delivery: local index, subs json


def group_deliveries(deliveries: Iterable[tuple[str, int, str]], mids: list[str], skip: set[int],
                     slot_of: Callable[[str], int], most: int = DELIVER_MOST) -> list[SlotGroup]:
    """Deliveries [(queue, message index, subs json)] by slot (`slot_of(queue)`; one slot when
    it answers 0 for all), at most `most` in a group, leaving out messages in `skip`."""
    groups: list[SlotGroup] = []
    open_: dict[int, SlotGroup] = {}  # slot -> its group still taking deliveries
    slots: dict[str, int] = {}
    for queue, idx, subs in deliveries:
        if idx in skip:
            continue
        slot = slots.get(queue)
        if slot is None:
            slot = slots[queue] = slot_of(queue)
        g = open_.get(slot)
        if g is None or len(g.pairs) >= 2 * most:
            g = open_[slot] = SlotGroup()
            groups.append(g)
        li = g.local.get(idx)
        if li is None:
            g.messages.append(idx)
            li = g.local[idx] = len(g.messages)
        g.keys += (K.queue_stream(queue), K.delivery_mark(queue, mids[idx]), K.queue_hash(queue))
        g.pairs += (li, subs)
    return groups


class Runner:
    """Runs script calls for one client; waits for replicas after writes if asked to."""

    def __init__(self, r: RedisClient, wait_replicas: int = 0, wait_ms: int = 0) -> None:
        self.r = r
        self.cluster = isinstance(r, RedisCluster)
        self.wait_replicas = wait_replicas
        self.wait_ms = wait_ms
        # One server's calls go out on connections of the runner's own (`_send_direct`).
        self._idle: list[Any] = []
        self._open: set[Any] = set()

    def slot_of_queue(self, queue: str) -> int:
        slot: int = self.r.keyslot(K.queue_stream(queue)) if self.cluster else 0
        return slot

    async def run(self, calls: list[Call], wait: bool = False) -> list[Any]:
        """Every call's result, in order; raises the first error. Scripts a server does not
        know yet (a restarted node, a promoted replica) are loaded and the calls sent again:
        only idempotent calls may come here. With `wait`, each node touched then waits for the
        store's replicas (NotReplicated if they do not answer in time)."""
        for attempt in (0, 1):
            results = await self._send(calls, wait and self.wait_replicas > 0)
            if attempt == 0 and any(isinstance(x, NoScriptError) for x in results):
                for script in {id(c.script): c.script for c in calls}.values():
                    await self.r.script_load(script.script)
                continue
            for x in results:
                if isinstance(x, Exception):
                    raise x
            return results[:len(calls)] if not (wait and self.wait_replicas) else self._checked(calls, results)
        raise AssertionError("unreachable")

    async def run_each(self, calls: list[Call]) -> list[Any]:
        """Every call's result or its error, in order, in one round trip (no waiting for
        replicas). A call the server did not know the script of is sent again once loaded;
        calls that ran are not sent again."""
        results = await self._send(calls, False)
        again = [i for i, x in enumerate(results[:len(calls)]) if isinstance(x, NoScriptError)]
        if again:
            for script in {id(calls[i].script): calls[i].script for i in again}.values():
                await self.r.script_load(script.script)
            for i, x in zip(again, await self._send([calls[i] for i in again], False)):
                results[i] = x
        return results[:len(calls)]

    async def close(self) -> None:
        """Close the runner's own connections (the client's pool closes its own)."""
        opened, self._open, self._idle = self._open, set(), []
        for conn in opened:
            await conn.disconnect()

    async def _send(self, calls: list[Call], wait: bool) -> list[Any]:
        if not self.cluster and (self._idle or len(self._open) < DIRECT_MOST):
            return await self._send_direct(calls, wait)
        async with self.r.pipeline(transaction=False) as p:
            nodes: dict[str, ClusterNode | None] = {}
            for c in calls:
                # as a raw command: redis-py's cluster pipeline refuses its evalsha() method,
                # though it routes EVALSHA by its keys like any keyed command
                p.execute_command("EVALSHA", c.script.sha, len(c.keys), *c.keys, *c.args)
                if wait and c.keys:
                    node = self.r.get_node_from_key(c.keys[0]) if self.cluster else None
                    nodes[node.name if node else ""] = node
            for node in nodes.values():
                if node is None:
                    p.execute_command("WAIT", self.wait_replicas, self.wait_ms)
                else:
                    p.execute_command("WAIT", self.wait_replicas, self.wait_ms, target_nodes=node)
            results: list[Any] = await p.execute(raise_on_error=False)
            return results

    async def _send_direct(self, calls: list[Call], wait: bool) -> list[Any]:
        """`_send` on one server, as redis-py's pipeline does it (the commands written at once,
        the replies read in order, an error reply in its place; a broken connection's calls
        sent once more on a new one), on a connection kept here rather than taken from the
        client's pool: its pool's bookkeeping, retry wrapper and pipeline object cost a
        dispatcher ~40 µs of CPU per call, a sixth of an empty poll's or an ack's (docs/
        benchmarks.md, "Latency"). A connection is put back only after every reply was read."""
        cmds: list[tuple[Arg, ...]] = [("EVALSHA", c.script.sha, len(c.keys), *c.keys, *c.args) for c in calls]
        if wait and any(c.keys for c in calls):
            cmds.append(("WAIT", self.wait_replicas, self.wait_ms))
        for attempt in (0, 1):
            conn = self._idle.pop() if self._idle and not attempt else self._new_connection()
            try:
                await conn.connect()
                await conn.send_packed_command(conn.pack_commands(cmds))
                out: list[Any] = []
                for _ in cmds:
                    try:
                        out.append(await conn.read_response())
                    except ResponseError as exc:
                        out.append(exc)
            except RedisConnectionError:
                await self._drop(conn)
                if attempt:
                    raise
                continue
            except BaseException:  # a timeout or a cancel mid-read: what is left unread is unknown
                await self._drop(conn)
                raise
            self._idle.append(conn)
            return out
        raise AssertionError("unreachable")

    def _new_connection(self) -> Any:
        conn = self.r.connection_pool.make_connection()
        self._open.add(conn)
        return conn

    async def _drop(self, conn: Any) -> None:
        self._open.discard(conn)
        await conn.disconnect()

    def _checked(self, calls: list[Call], results: list[Any]) -> list[Any]:
        acked = results[len(calls):]
        if any(int(n) < self.wait_replicas for n in acked):
            raise NotReplicated(f"a write reached {min(map(int, acked))} of the {self.wait_replicas} replicas "
                                f"waited for within {self.wait_ms} ms")
        return results[:len(calls)]
