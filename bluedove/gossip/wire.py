"""Envelopes to and from their protobuf form (proto/bluedove/v1/gossip.proto)."""

from __future__ import annotations

from bluedove.gossip.messages import (
    MATCHER,
    Ack,
    Body,
    Envelope,
    MemberState,
    Ping,
    PingReq,
    Push,
    PushReply,
    TableUpdate,
)
from bluedove.v1 import gossip_pb2 as pb


def _entry(m: MemberState) -> pb.MemberEntry:
    return pb.MemberEntry(id=m.id, addr=m.addr, generation=m.generation, incarnation=m.incarnation,
                          heartbeat=m.heartbeat, status=m.status, subs=m.subs, lam=m.lam, mu=m.mu, role=m.role)


def _member(e: pb.MemberEntry) -> MemberState:
    # An entry without a role comes from a member that predates roles: only matchers did.
    return MemberState(e.id, e.addr, e.generation, e.incarnation, e.heartbeat, e.status, tuple(e.subs), e.lam, e.mu,
                       e.role or MATCHER)


def _spaces(spaces: tuple[tuple[str, int], ...]) -> list[pb.SpaceEpoch]:
    return [pb.SpaceEpoch(name=n, epoch=e) for n, e in spaces]


def to_proto(env: Envelope) -> pb.Envelope:
    out = pb.Envelope(sender=env.sender, sender_addr=env.sender_addr)
    b = env.body
    if isinstance(b, Push):
        out.push.CopyFrom(pb.Push(members=[_entry(m) for m in b.members], epoch=b.epoch, spaces=_spaces(b.spaces)))
    elif isinstance(b, PushReply):
        out.push_reply.CopyFrom(pb.PushReply(members=[_entry(m) for m in b.members], epoch=b.epoch,
                                             table_json=b.table_json, spaces=_spaces(b.spaces)))
    elif isinstance(b, TableUpdate):
        out.table_update.CopyFrom(pb.TableUpdate(epoch=b.epoch, table_json=b.table_json))
    elif isinstance(b, Ping):
        out.ping.CopyFrom(pb.Ping(seq=b.seq))
    elif isinstance(b, Ack):
        out.ack.CopyFrom(pb.Ack(seq=b.seq, target=b.target))
    elif isinstance(b, PingReq):
        out.ping_req.CopyFrom(pb.PingReq(seq=b.seq, target=b.target, target_addr=b.target_addr))
    else:
        raise TypeError(f"unknown gossip message {type(b).__name__}")
    return out


def from_proto(msg: pb.Envelope) -> Envelope:
    kind = msg.WhichOneof("body")
    body: Body
    if kind == "push":
        body = Push(tuple(_member(e) for e in msg.push.members), msg.push.epoch,
                    tuple((x.name, x.epoch) for x in msg.push.spaces))
    elif kind == "push_reply":
        r = msg.push_reply
        body = PushReply(tuple(_member(e) for e in r.members), r.epoch, r.table_json,
                         tuple((x.name, x.epoch) for x in r.spaces))
    elif kind == "table_update":
        body = TableUpdate(msg.table_update.epoch, msg.table_update.table_json)
    elif kind == "ping":
        body = Ping(msg.ping.seq)
    elif kind == "ack":
        body = Ack(msg.ack.seq, msg.ack.target)
    elif kind == "ping_req":
        body = PingReq(msg.ping_req.seq, msg.ping_req.target, msg.ping_req.target_addr)
    else:
        raise ValueError("gossip envelope without a body")
    return Envelope(msg.sender, msg.sender_addr, body)


def encode(env: Envelope) -> bytes:
    return to_proto(env).SerializeToString()


def decode(data: bytes) -> Envelope:
    return from_proto(pb.Envelope.FromString(data))
