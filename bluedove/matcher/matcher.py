"""One matcher process: the index thread, the gossip membership, the start-up and the leave,
around the state of each space it serves (bluedove/matcher/space_state.py: the table, a
subscription set per dimension, the input queue and the catalogue tail). The properties below
read and write the default space's; bluedove/matcher/spaces_served.py keeps the named ones'.
Its operations return replies or raise MatcherError (bluedove/matcher/errors.py);
bluedove/matcher/servicer.py serves them over gRPC and bluedove/matcher/server.py runs the
process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, TypeVarTuple

from bluedove.core.partition.bootstrap import ensure_table, parse_members, register_address
from bluedove.core.partition.segments import SegmentTable
from bluedove.core.space import Space
from bluedove.core.spaces import DEFAULT_SPACE
from bluedove.gossip.config import GossipConfig
from bluedove.matcher.decisions import serving_ready
from bluedove.matcher.errors import BadRequest, NotReady
from bluedove.matcher.index_thread import IndexThread
from bluedove.matcher.load import WindowStats
from bluedove.matcher.membership import Membership
from bluedove.matcher.queues import LogTarget, MatcherQueue
from bluedove.matcher.series import run_series
from bluedove.matcher.sets import SubscriptionSets
from bluedove.matcher.sets_owner import SetsOwner
from bluedove.matcher.space_changes import NamedChanges
from bluedove.matcher.space_state import SpaceState
from bluedove.matcher.spaces_served import ServedSpaces
from bluedove.matcher.warm import warm_up
from bluedove.runtime.cpu_limit import NONE_KNOWN
from bluedove.runtime.settings import MatcherSettings
from bluedove.store.keys import log_shard
from bluedove.store.spaces import SpaceStore
from bluedove.store.store import MatcherStore, wait_ready
from bluedove.v1 import matcher_pb2 as pb

log = logging.getLogger("bluedove.matcher")
R = TypeVar("R")
Ts = TypeVarTuple("Ts")
SPACE_LOADS_MOST = 64  # named spaces' loads a report carries at most, the busiest


class Matcher:
    """One matcher process around its spaces' state (`default` today)."""

    def __init__(self, settings: MatcherSettings, store: MatcherStore, deliver: str = "store",
                 gossip: GossipConfig | None = None, seeds: tuple[str, ...] = (), space: Space | None = None,
                 seed: dict[str, Any] | None = None, space_log: int | None = None) -> None:
        self.s = settings
        self.store = store
        self.space = space  # given: propose the first table on an empty store, refuse another space
        self.seed = seed  # with the space: the first table's layout (bluedove/core/partition/seeds.py)
        self.space_log = space_log  # with it: its file's `retention_s`, the log `default` is registered with
        self.advertise = settings.advertise or f"{settings.host}:{settings.port}"
        self.generation = time.time_ns()
        # Every index operation (add, remove, match) runs one at a time, on this thread but for
        # small matches: the R-tree is not thread-safe, and the event loop stays free for gRPC and Redis.
        self.index = IndexThread()
        self.membership = Membership(self, gossip or GossipConfig(), seeds, settings.peers_dns,
                                     settings.peers_dns_retry_s)
        self.default = SpaceState(DEFAULT_SPACE, settings, store, self.index, deliver,
                                  self.membership.offer)
        # The named spaces: their tables spread by Prepare and the store; gossip carries their epochs.
        self.named = ServedSpaces(SpaceStore(store.r), store, lambda name: SpaceState(
            name, settings, store, self.index, deliver,
            lambda table: self.membership.offer_space(name, table.epoch)), settings)
        self.changes = NamedChanges(self.membership, self.named)  # their takeovers, joins and leaves
        self._tasks: list[asyncio.Task[None]] = []
        self.log_retention_s = 0  # the default space's log (its registered record's `retention_s`)
        self.stopping = asyncio.Event()  # set when the process should exit

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        await wait_ready(self.store)
        table = await self._boot_table()
        queue = self.default.begin(table)
        if self.log_retention_s:  # its batches go to its log too (bluedove/store/message_log.py)
            queue.log = LogTarget(DEFAULT_SPACE, log_shard(self.s.id), self.log_retention_s)
        # The index walk compiled before we join: a compile holds the GIL long enough for the
        # other members to suspect a process that has just joined.
        await self.run_index(warm_up)
        # Gossip next: liveness does not wait for a long catalogue load (Forward answers
        # UNAVAILABLE meanwhile, and dispatchers try another candidate).
        self.membership.start(self.advertise, table)
        assert self.membership.agent is not None, "`start` makes the gossip agent"
        self.membership.agent.on_round.append(self.changes.after_round)
        node = self.membership.node
        assert node is not None, "`start` makes the node"
        self.membership.agent.on_round.append(lambda: self.named.heard(node.spaces.take_rises()))
        await self.default.load()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(run()) for run in self.default.tasks()]
        self._tasks.append(loop.create_task(run_series(self, queue.totals)))
        self._tasks.append(loop.create_task(self.named.run()))
        log.info("matcher %s ready: %s subscriptions per dimension", self.s.id, self._started().counts())
        # What start-up left (the imports, the compiled kernels, the first sets) is never
        # garbage: out of the collector's reach, a full collection no longer walks it (~70 ms
        # each, a pause a Forward waits through, e.g. under a queue deletion's allocations).
        gc.collect()
        gc.freeze()

    async def _boot_table(self) -> SegmentTable:
        """The stored table: with a space, proposed first if the store has none (as `bluedove init` does;
        raises SpaceMismatch for a table over another space), else waited for; `default` registered (every
        way of starting a cluster boots a matcher). Our address is stored first if we own segments without it."""
        spaces = SpaceStore(self.store.r)
        if self.space is not None:
            space = self.space
            members = (parse_members(self.s.boot_members, "--boot-members") if self.s.boot_members
                       else {self.s.id: self.advertise})
            (table, created), rec = await spaces.declare_default(
                self.store, space, self.space_log, lambda: ensure_table(self.store, space, members, self.seed,
                                                                   given_from=f"--space {self.s.space_file}"))
            if created:
                log.warning("matcher %s wrote the first segment table: owners %s", self.s.id, ", ".join(members))
        else:
            raw = None
            while raw is None:
                raw = await self.store.get_table()
                if raw is None:
                    await asyncio.sleep(self.s.table_wait_s)
            table = SegmentTable.from_json(raw)
            rec = await spaces.ensure_default(table.space)
        self.log_retention_s = rec.spec.retention_s  # fixed when `default` was registered
        was = table.members.get(self.s.id)
        table = await register_address(self.store, self.s.id, self.advertise, table)
        if was is not None and was != self.advertise:
            log.warning("matcher %s registered its address %s (was %s) at epoch %d", self.s.id, self.advertise,
                        was or "none", table.epoch)
        return table

    def serving_ready(self) -> bool:
        """gRPC health "bluedove.ready" (the readiness probe): see `decisions.serving_ready`."""
        return serving_ready(self.ready, self.s.id, self.table, max(self.newest_epoch, self.membership.epoch()))

    async def stop(self) -> None:
        await self.membership.stop()
        await self.changes.stop()
        for t in self._tasks:
            t.cancel()
        await self.named.stop()
        if self.queue is not None:
            await self.queue.stop()
        self.index.shutdown()

    async def run_index(self, fn: Callable[[*Ts], R], *args: *Ts) -> R:
        return await self.index.run(fn, *args)

    # -- the default space's state, read and written through the process (servicer, gossip,
    # metrics and tests address the matcher) --------------------------------------------------
    @property
    def table(self) -> SegmentTable | None:
        return self.default.table

    @table.setter
    def table(self, table: SegmentTable | None) -> None:
        self.default.table = table

    @property
    def newest_epoch(self) -> int:
        return self.default.newest_epoch

    @newest_epoch.setter
    def newest_epoch(self, epoch: int) -> None:
        self.default.newest_epoch = epoch

    @property
    def ready(self) -> bool:
        return self.default.ready

    @ready.setter
    def ready(self, ready: bool) -> None:
        self.default.ready = ready

    @property
    def queue(self) -> MatcherQueue | None:
        return self.default.queue

    @queue.setter
    def queue(self, queue: MatcherQueue | None) -> None:
        self.default.queue = queue

    @property
    def stats(self) -> list[WindowStats]:
        return self.default.stats

    @stats.setter
    def stats(self, stats: list[WindowStats]) -> None:
        self.default.stats = stats

    @property
    def owner(self) -> SetsOwner:
        return self.default.owner

    @property
    def sets(self) -> SubscriptionSets | None:
        return self.default.sets

    @property
    def refused(self) -> int:
        return self.default.refused

    async def apply_table(self, new: SegmentTable) -> None:
        await self.default.apply_table(new)

    async def prepare(self, new: SegmentTable, adopt: bool = False,
                      sources: Sequence[pb.Source] = ()) -> pb.PrepareReply:
        return await self.default.prepare(new, adopt, sources)

    def load_summary(self) -> tuple[tuple[int, ...], float, float]:
        return self.default.load_summary()

    async def state(self, space: str) -> SpaceState:
        """The state of `space` ("": the default space); NotReady for a space not served here."""
        return self.default if space in ("", DEFAULT_SPACE) else await self.named.state(space)

    async def forward(self, req: pb.ForwardRequest) -> pb.ForwardReply:
        return await (await self.state(req.space)).forward(req)

    async def match(self, req: pb.ForwardRequest) -> pb.MatchReply:
        return await (await self.state(req.space)).match(req)

    async def add_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        return await (await self._touched(req.space)).add_subscriptions(req)

    async def replace_subscriptions(self, req: pb.SubscriptionBatch) -> pb.SubscriptionAck:
        return await (await self._touched(req.space)).replace_subscriptions(req)

    async def remove_subscriptions(self, req: pb.RemoveRequest) -> pb.SubscriptionAck:
        return await (await self._touched(req.space)).remove_subscriptions(req)

    async def _touched(self, space: str) -> SpaceState:
        """`space`'s state, for a subscription change sent directly: a named space's catalogue
        log is read often while they come (bluedove/matcher/named_tails.py)."""
        state = await self.state(space)
        if state is not self.default:
            self.named.tails.touch(state.name, time.monotonic())
        return state

    async def export(self, req: pb.ExportRequest) -> pb.ExportReply:
        return await (await self.state(req.space)).export(req)

    def _started(self) -> SubscriptionSets:
        return self.default.started()

    def _table_now(self) -> SegmentTable:
        return self.default.table_now()

    async def table_reply(self) -> pb.TableReply:
        """The table as this matcher holds it, with the members gossip knows."""
        return pb.TableReply(table_json=json.dumps(self._table_now().to_json()), members=self.membership.members())

    async def prepare_json(self, table_json: str, adopt: bool, sources: Sequence[pb.Source],
                           space: str = "") -> pb.PrepareReply:
        """`prepare` for a table of `space` sent as JSON by a coordinator."""
        state = await self.state(space)
        state.started()
        return await state.prepare(SegmentTable.from_json(json.loads(table_json)), adopt=adopt, sources=sources)

    async def propose_json(self, table_json: str, reason: str, space: str = DEFAULT_SPACE) -> pb.ProposeReply:
        """A table proposed by an operator (`bluedove seed --apply`), as JSON, for `space`:
        BadRequest if it does not parse; otherwise membership (a named space's changes) decides."""
        try:
            table = SegmentTable.from_json(json.loads(table_json))
        except (ValueError, KeyError, TypeError) as exc:
            raise BadRequest(f"table_json: {exc}") from None
        if space == DEFAULT_SPACE:
            return await self.membership.propose(table, reason or "a table proposed")
        why, epoch = await self.changes.propose(space, table, reason or "a table proposed")
        if why is not None:
            log.warning("proposed table of space %r (epoch %d) refused: %s", space, table.epoch, why)
        return pb.ProposeReply(ok=why is None, reason=why or "", epoch=epoch)

    async def leave_now(self) -> pb.LeaveReply:
        """`leave`, asked over gRPC: NotReady while starting."""
        if not self.ready:
            raise NotReady("matcher is starting")
        return await self.leave()

    async def leave(self) -> pb.LeaveReply:
        """Hand our segments off (the named spaces' first, then the default's), serve through the
        grace period, then stop the process."""
        self.membership.leaving = True
        self.membership.announce_leave()  # nobody joins us back or takes us over meanwhile
        why = await self.changes.leave(time.monotonic() + self.s.leave_timeout_s)
        if why is not None:
            return pb.LeaveReply(ok=False, reason=why, epoch=self._table_now().epoch)
        reply = await self.membership.leave()
        if reply.ok:
            loop = asyncio.get_running_loop()
            loop.call_later(self.s.handoff_grace_s, self.stopping.set)
            log.warning("matcher %s left at epoch %d; exiting in %.0f s", self.s.id, reply.epoch,
                        self.s.handoff_grace_s)
        return reply

    async def report_in(self, space: str) -> pb.ReportReply:
        """`report` with `space`'s dimensions (NotReady for a space not served here)."""
        return self.report(await self.state(space))

    def report(self, state: SpaceState | None = None, with_spaces: bool = False) -> pb.ReportReply:
        """The process's load and gossip figures, with the dimensions of `state`'s space (the
        default's), and with `with_spaces` each busy named space's load."""
        now = time.monotonic()
        dims = (state or self.default).dims_report(now)
        queue = self.queue
        # the process's CPU against its cgroup's limit (a pod's), zeros where none is known
        cpu = queue.cpu.read(now) if queue is not None else NONE_KNOWN
        return pb.ReportReply(id=self.s.id, generation=self.generation, ready=self.ready,
                              epoch=self.table.epoch if self.table else 0, dims=dims,
                              window_s=self.s.stats_window_s, cpu_limit_cores=cpu.cores, cpu_limit_used=cpu.used,
                              cpu_throttled=cpu.throttled, gossip_bytes_sent=self.membership.transport.bytes_sent,
                              gossip_messages_sent=self.membership.transport.sent,
                              spaces=self.space_loads(now) if with_spaces else ())

    def space_loads(self, now: float) -> list[pb.SpaceLoad]:
        """The named spaces with work here over the window or grown by the autoscaler, the
        busiest SPACE_LOADS_MOST."""
        out = []
        for name, sv in list(self.named.served.items()):
            st = sv.state
            if st.table is None:
                continue
            busy, queued = st.busy(now)
            base = sv.rec.base or sv.spans
            if busy > 0 or queued or sv.spans > base:
                out.append(pb.SpaceLoad(name=name, busy=busy, queued=queued, matchers=len(st.table.members),
                                        fixed=sv.rec.spec.matchers is not None, spans=sv.spans, base=base))
        out.sort(key=lambda x: -x.busy)
        return out[:SPACE_LOADS_MOST]

