"""The gossip protocol as pure state: membership, heartbeats, suspicion, and the segment table.

A `Node` never touches a socket or a clock. Its driver calls `tick(now)` once per round and
`receive(envelope, now)` for every envelope that arrives, and sends the `Out`s they return;
the in-memory network of the tests and the gRPC transport of the matcher are two drivers.

The paper's §III-C: matchers keep the global view (contact information, segment boundaries,
load) by gossip. Member entries are ordered by (generation, incarnation, status, heartbeat):
a restart is a new generation; only the member itself bumps its incarnation, to refute a
suspicion (SWIM); at one incarnation dead beats suspect beats alive. Failure detection is
phi-accrual on heartbeat arrivals, confirmed before suspicion by a probe through up to three
other members (as chordal reliability rings do: ask the neighbour's neighbour), so one broken link evicts nobody.

A round pushes the whole view to `quiet_fanout` peers; a push is answered only with news for
the pusher; news is pushed on at once, and for `news_rounds` rounds, to ceil(log2 N) + 1 peers.
Every envelope costs a stream write and a read, so a quiet cluster sends few (docs/design.md,
"Gossip and failure detection").

Every member has a role: matchers, and dispatchers, which join to learn the table and the
membership within a round and own no segments. Gossip treats both alike (they are pushed to,
probed and declared dead the same way); what a role means is the owner's business (a matcher
never takes a dispatcher for an idle matcher: `bluedove/matcher/decisions.py`).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from bluedove.gossip.config import GossipConfig
from bluedove.gossip.detector import ArrivalWindow, z_for
from bluedove.gossip.messages import (
    ALIVE,
    DEAD,
    LEFT,
    MATCHER,
    ROLES,
    STATUS_NAMES,
    SUSPECT,
    Ack,
    Body,
    Envelope,
    MemberState,
    Out,
    Ping,
    PingReq,
    Push,
    PushReply,
    TableUpdate,
)
from bluedove.gossip.space_epochs import SpaceEpochs


@dataclass
class _Probe:
    """A direct probe of a suspected member: its sequence number, when it times out, its key."""

    seq: int
    deadline: float
    key: tuple[int, int, int, int]


@dataclass
class _Relay:
    """A probe this member relays for another: whom to answer, with which sequence, until when."""

    requester_addr: str
    requester_seq: int
    target: str
    expires: float


def fanout(n_live: int, extra: int) -> int:
    """Peers per round: ceil(log2 N) + extra (N counts the live members, this one included)."""
    return math.ceil(math.log2(max(n_live, 1))) + extra


def suspicion_timeout(base_s: float, n_live: int) -> float:
    """Time a suspect has to refute, growing with the rounds a rumour needs (log2 N) beyond 8."""
    return base_s * max(1.0, math.log2(max(n_live, 1)) / 3.0)


@dataclass
class Node:
    """One member's gossip state: its view of the members, failure detection, probes and the table."""

    id: str
    addr: str
    generation: int
    config: GossipConfig = field(default_factory=GossipConfig)
    seeds: tuple[str, ...] = ()
    rng: random.Random = field(default_factory=random.Random)
    role: str = MATCHER

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role {self.role!r}: expected one of {', '.join(ROLES)}")
        self.members: dict[str, MemberState] = {
            self.id: MemberState(self.id, self.addr, self.generation, role=self.role)}
        self.windows: dict[str, ArrivalWindow] = {}
        self.suspect_since: dict[str, float] = {}
        self.probes: dict[str, _Probe] = {}
        self.relays: dict[int, _Relay] = {}
        self.epoch = 0
        self.table_json = ""
        self.spaces = SpaceEpochs()  # named spaces' table epochs (bluedove/gossip/space_epochs.py)
        self.rounds = 0
        self.events: deque[tuple[float, str, str]] = deque(maxlen=1000)  # (now, member, status)
        self._seq = 0
        self._load: tuple[tuple[int, ...], float, float] = ((), 0.0, 0.0)
        self._z = z_for(self.config.phi_threshold)
        self._last_tick: float | None = None
        self._news_round = -(10**9)  # the last round in which this member learned news
        self._learned = 0  # news learned since start: a receive that moves it pushes it on
        self._spaces_rose = 0  # the space rises (SpaceEpochs.rose) already taken as news
        self._eager_round = -1  # the round in which news was last pushed on eagerly

    # -- queries ---------------------------------------------------------------------------
    @property
    def me(self) -> MemberState:
        return self.members[self.id]

    def status(self, member: str) -> str | None:
        m = self.members.get(member)
        return STATUS_NAMES[m.status] if m else None

    def live(self) -> list[MemberState]:
        """Members not dead or left, this one included."""
        return [m for m in self.members.values() if not m.gone]

    def peers(self) -> list[MemberState]:
        """Live members other than this one: none means this node is on its own (seeds only)."""
        return [m for m in self.members.values() if not m.gone and m.id != self.id]

    # -- inputs from the owner -------------------------------------------------------------
    def set_load(self, subs: tuple[int, ...], lam: float, mu: float) -> None:
        """Published with the next heartbeat."""
        self._load = (tuple(subs), float(lam), float(mu))

    def offer_table(self, epoch: int, table_json: str) -> bool:
        """Adopt a segment table if it is newer than ours; the next rounds spread it."""
        if epoch > self.epoch and table_json:
            self.epoch, self.table_json = epoch, table_json
            self._news()
            return True
        return False

    def expect(self, members: dict[str, str], now: float) -> None:
        """Members we have not heard from but should (the table's owners, matchers): entries of
        generation 0, which any real entry replaces, watched after `join_grace_s`."""
        for mid, addr in members.items():
            if mid not in self.members:
                self.members[mid] = MemberState(mid, addr, 0)
                w = self.windows[mid] = ArrivalWindow(self.config.phi_window, self.config.phi_min_std_s,
                                                      self.config.interval_s)
                w.touch(now + self.config.join_grace_s)

    def leave(self, now: float) -> None:
        """Announce a graceful departure; peers learn it with the next pushes."""
        self._set(replace(self.me, status=LEFT), now)

    # -- one round -------------------------------------------------------------------------
    def tick(self, now: float) -> list[Out]:
        self.rounds += 1
        self._excuse_own_stall(now)
        me = self.me
        if not me.gone:
            subs, lam, mu = self._load
            self.members[self.id] = replace(me, heartbeat=me.heartbeat + 1, subs=subs, lam=lam, mu=mu)
        out: list[Out] = []
        self._expire(now)
        out += self._detect(now)
        out += self._push_round(now)
        return out

    def _excuse_own_stall(self, now: float) -> None:
        """If this node itself was held up (a busy event loop, a paused process), the silence
        of others over that time is ours: restart their clocks and push deadlines back, rather
        than suspect everyone at once (Lifeguard's local health, in its simplest form)."""
        last, self._last_tick = self._last_tick, now
        if last is None:
            return
        stall = now - last - self.config.interval_s
        if stall <= self.config.interval_s:
            return
        for w in self.windows.values():
            w.touch(now)
        for p in self.probes.values():
            p.deadline += stall
        for m in self.suspect_since:
            self.suspect_since[m] += stall

    def _expire(self, now: float) -> None:
        c = self.config
        for target, p in list(self.probes.items()):
            if now >= p.deadline:
                del self.probes[target]
                m = self.members.get(target)
                if m is not None and m.key == p.key and m.status == ALIVE:
                    # No ack, directly or through others: suspect it (it may still refute).
                    self._set(replace(m, status=SUSPECT), now)
        limit = suspicion_timeout(c.suspect_timeout_s, len(self.live()))
        for target, since in list(self.suspect_since.items()):
            m = self.members.get(target)
            if m is None or m.status != SUSPECT:
                self.suspect_since.pop(target, None)
            elif now - since >= limit:
                self._set(replace(m, status=DEAD), now)
        for seq, r in list(self.relays.items()):
            if now >= r.expires:
                del self.relays[seq]

    def _detect(self, now: float) -> list[Out]:
        c = self.config
        out: list[Out] = []
        for m in list(self.members.values()):
            if m.id == self.id or m.status != ALIVE or m.id in self.probes:
                continue
            w = self.windows.get(m.id)
            if w is None or now < w.suspect_at(self._z):  # phi(now) < threshold, without the log
                continue
            seq = self._next_seq()
            self.probes[m.id] = _Probe(seq, now + c.probe_timeout_s, m.key)
            if not m.addr:  # expected by id, address unknown: no ack can come, so it is suspected
                continue
            out.append(self._out(m.addr, Ping(seq)))
            helpers = [h for h in self.members.values() if h.status == ALIVE and h.id not in (self.id, m.id)]
            for h in self.rng.sample(helpers, min(c.indirect_probes, len(helpers))):
                out.append(self._out(h.addr, PingReq(seq, m.id, m.addr)))
        return out

    def _push_round(self, now: float, eager: bool = False) -> list[Out]:
        """Push our view to the round's peers: the full fanout while news is fresh here (or at
        once, eagerly, when a received envelope brought it), else the quiet fanout."""
        live = self.live()
        peers = [m for m in live if m.id != self.id and m.addr]  # no address: expected, not reachable yet
        n = min(fanout(len(live), self.config.fanout_extra) if eager else self._fanout(len(live)), len(peers))
        addrs = [m.addr for m in self.rng.sample(peers, n)]
        if not peers:
            seeds = [s for s in self.seeds if s != self.addr]
            addrs = self.rng.sample(seeds, min(len(seeds), fanout(1, self.config.fanout_extra)))
        gone = [m for m in self.members.values() if m.gone and m.id != self.id and m.addr]
        if gone and not eager and self.rng.random() < self.config.dead_push_prob:
            addrs.append(self.rng.choice(gone).addr)
        push = Push(tuple(self.members.values()), self.epoch, self.spaces.news(now))
        return [self._out(a, push) for a in addrs]

    def _fanout(self, n_live: int) -> int:
        """The full fanout while news is fresh here, else the quiet one (never more)."""
        self._space_news()
        full = fanout(n_live, self.config.fanout_extra)
        if self.rounds - self._news_round <= self.config.news_rounds:
            return full
        return min(full, self.config.quiet_fanout)

    def _news(self) -> None:
        self._news_round = self.rounds
        self._learned += 1

    def _space_news(self) -> None:
        """A space's epoch rose here since we last looked (the owner's or a peer's): news."""
        if self.spaces.rose != self._spaces_rose:
            self._spaces_rose = self.spaces.rose
            self._news()

    # -- receiving -------------------------------------------------------------------------
    def receive(self, env: Envelope, now: float) -> list[Out]:
        """Act on an envelope. News it brings (a member joining, suspected, dead or back, a new
        table) is pushed on at once to the full fanout, at most once a round: spreading it need
        not wait for the rounds, which in a quiet cluster push to few."""
        learned = self._learned
        out = self._receive(env, now)
        self._space_news()
        if self._learned != learned and self._eager_round != self.rounds:
            self._eager_round = self.rounds
            out += self._push_round(now, eager=True)
        return out

    def _receive(self, env: Envelope, now: float) -> list[Out]:
        body = env.body
        w = self.windows.get(env.sender)
        if w is not None:
            w.touch(now)  # a message from it is evidence it lives
        if isinstance(body, Push):
            return self._answer(env, body, now)
        if isinstance(body, PushReply):
            self._merge(body.members, now)
            self.spaces.merge(body.spaces, now)
            if body.table_json:
                self.offer_table(body.epoch, body.table_json)
            if body.epoch < self.epoch:
                return [self._out(env.sender_addr, TableUpdate(self.epoch, self.table_json))]
            return []
        if isinstance(body, TableUpdate):
            self.offer_table(body.epoch, body.table_json)
            return []
        if isinstance(body, Ping):
            return [self._out(env.sender_addr, Ack(body.seq, self.id))]
        if isinstance(body, PingReq):
            seq = self._next_seq()
            self.relays[seq] = _Relay(env.sender_addr, body.seq, body.target, now + self.config.relay_ttl_s)
            return [self._out(body.target_addr, Ping(seq))]
        if isinstance(body, Ack):
            relay = self.relays.pop(body.seq, None)
            if relay is not None:
                return [self._out(relay.requester_addr, Ack(relay.requester_seq, relay.target))]
            p = self.probes.get(body.target)
            if p is not None and p.seq == body.seq:
                del self.probes[body.target]
                if body.target in self.windows:
                    self.windows[body.target].touch(now)
            return []
        raise TypeError(f"unknown gossip message {type(body).__name__}")

    def _answer(self, env: Envelope, push: Push, now: float) -> list[Out]:
        """Merge a push, and answer it only with news for the pusher: a member it lacks or holds
        at an older generation, incarnation or status, another table, a space's epoch it did not
        carry. Newer heartbeats alone need no answer (every push carries them), and answering
        every push doubled the envelopes of a quiet round."""
        theirs = {m.id: m.key for m in push.members}
        self._merge(push.members, now)
        newer = tuple(m for m in self.members.values() if m.id not in theirs or m.key > theirs[m.id])
        news = self.spaces.news(now)
        self.spaces.merge(push.spaces, now)
        if push.epoch == self.epoch and not set(news) - set(push.spaces) \
                and not any(m.id not in theirs or m.key[:3] > theirs[m.id][:3] for m in newer):
            return []
        table = self.table_json if self.epoch > push.epoch else ""
        return [self._out(env.sender_addr, PushReply(newer, self.epoch, table, news))]

    def _merge(self, entries: Iterable[MemberState], now: float) -> None:
        for e in entries:
            if e.id == self.id:
                me = self.me
                if e.generation == me.generation and e.incarnation >= me.incarnation and e.status != me.status \
                        and me.status == ALIVE:
                    # Suspected (or declared dead) while alive: refute with a higher incarnation.
                    self.members[self.id] = replace(me, incarnation=e.incarnation + 1)
                    self._news()
                continue
            cur = self.members.get(e.id)
            if cur is None or e.key > cur.key:
                if cur is not None and cur.generation == e.generation and cur.status == e.status \
                        and cur.incarnation == e.incarnation:
                    # The common case, a newer heartbeat: one arrival for the detector.
                    self.members[e.id] = e
                    self.windows[e.id].record(now)
                else:
                    self._install(e, cur, now)

    def _install(self, e: MemberState, cur: MemberState | None, now: float) -> None:
        if cur is None or e.generation != cur.generation:
            self.windows[e.id] = ArrivalWindow(self.config.phi_window, self.config.phi_min_std_s,
                                               self.config.interval_s)
            self.windows[e.id].record(now)
            self.probes.pop(e.id, None)
        elif e.heartbeat > cur.heartbeat:
            self.windows[e.id].record(now)
        self._set(e, now, cur)

    def _set(self, e: MemberState, now: float, cur: MemberState | None = None) -> None:
        cur = self.members.get(e.id) if cur is None else cur
        self.members[e.id] = e
        self._news()
        if cur is None or cur.status != e.status:
            self.events.append((now, e.id, STATUS_NAMES[e.status]))
        if e.status == SUSPECT:
            if cur is None or cur.status != SUSPECT or cur.incarnation != e.incarnation:
                self.suspect_since[e.id] = now
        else:
            self.suspect_since.pop(e.id, None)

    # -- helpers ---------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _out(self, addr: str, body: Body) -> Out:
        return Out(addr, Envelope(self.id, self.addr, body))
