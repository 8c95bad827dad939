"""The gossip protocol's vocabulary: member statuses and roles, a member's entry, and the
one-way messages members exchange (their wire form: proto/bluedove/v1/gossip.proto,
bluedove/gossip/wire.py). `bluedove/gossip/state.py` is the protocol that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALIVE, SUSPECT, DEAD, LEFT = 0, 1, 2, 3
STATUS_NAMES = ("alive", "suspect", "dead", "left")
MATCHER, DISPATCHER = "matcher", "dispatcher"
ROLES = (MATCHER, DISPATCHER)


@dataclass(frozen=True)
class MemberState:
    """One member's entry in the gossip view: address, liveness, load and role (MemberEntry)."""

    id: str
    addr: str
    generation: int
    incarnation: int = 0
    heartbeat: int = 0
    status: int = ALIVE
    subs: tuple[int, ...] = ()
    lam: float = 0.0
    mu: float = 0.0
    role: str = MATCHER  # fixed for a generation: a process is one or the other
    # The merge order: the entry with the greater key wins. Kept, not recomputed: merging
    # compares every entry of every push.
    key: tuple[int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.generation, self.incarnation, self.status, self.heartbeat))

    @property
    def gone(self) -> bool:
        return self.status in (DEAD, LEFT)


# -- messages (one-way; see proto/bluedove/v1/gossip.proto) --------------------------------
@dataclass(frozen=True)
class Push:
    """The sender's view of the members and its table's epoch, pushed to peers every round, with
    the named spaces' table epochs that rose lately (`SpaceEpochs`)."""

    members: tuple[MemberState, ...]
    epoch: int
    spaces: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class PushReply:
    """A push's answer, sent only when the pusher lacks news (not for heartbeats alone): the
    entries newer than the pusher's, and our table if it is newer."""

    members: tuple[MemberState, ...]
    epoch: int
    table_json: str = ""
    spaces: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class TableUpdate:
    """A segment table (as JSON) and its epoch, sent to a member whose table is older."""

    epoch: int
    table_json: str


@dataclass(frozen=True)
class Ping:
    """A probe of a member, answered by an Ack with the same seq."""

    seq: int


@dataclass(frozen=True)
class Ack:
    """The answer to a Ping: its seq, and who answered (for an indirect probe, the probed member)."""

    seq: int
    target: str


@dataclass(frozen=True)
class PingReq:
    """A request to probe `target` at `target_addr` for the sender (SWIM's ping-req)."""

    seq: int
    target: str
    target_addr: str


Body = Push | PushReply | TableUpdate | Ping | Ack | PingReq


@dataclass(frozen=True)
class Envelope:
    """One gossip message, with its sender's id and the address replies go to."""

    sender: str
    sender_addr: str
    body: Body


@dataclass(frozen=True)
class Out:
    """An envelope for the driver to send, and the address it goes to."""

    addr: str
    envelope: Envelope
