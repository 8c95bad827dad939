"""The SDK's JSON (the REST API's) to and from the gRPC API's messages (bluedove.v1.PubSub)."""

from __future__ import annotations

import json
import math
from typing import Any

from bluedove.client.errors import BlueDoveError, InvalidMessage, InvalidSubscription
from bluedove.client.transport import Json
from bluedove.v1 import pubsub_pb2 as pb


def _number(v: object, err: type[BlueDoveError], where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise err("invalid_message" if err is InvalidMessage else "invalid_subscription",
                  f"must be a number, got {v!r}", where)
    return float(v)


def message_pb(body: Json, where: str = "") -> pb.Message:
    """A message's numbers in `attributes` (as every server reads them), its strings and
    booleans in `values`."""
    attrs = body.get("attributes")
    if not isinstance(attrs, dict):
        raise InvalidMessage("invalid_message", "attributes must be an object", f"{where}attributes")
    numbers: dict[str, float] = {}
    values: dict[str, pb.Value] = {}
    for k, v in attrs.items():
        if isinstance(v, bool):
            values[k] = pb.Value(flag=v)
        elif isinstance(v, str):
            values[k] = pb.Value(text=v)
        elif isinstance(v, (int, float)):
            numbers[k] = _number(v, InvalidMessage, f"{where}attributes.{k}")
        else:
            raise InvalidMessage("invalid_message", f"must be a number, a string or a boolean, got {v!r}",
                                 f"{where}attributes.{k}")
    payload = body.get("payload")
    return pb.Message(attributes=numbers, values=values,
                      payload="" if payload is None else json.dumps(payload, separators=(",", ":")),
                      id=body.get("id") or "")


def _ranges(predicates: Json) -> dict[str, pb.Range] | None:
    """Predicates that are all [low, high] ranges of numbers as `Range`s (what every server
    reads); None for any other filter (sent as `filter_json`)."""
    if "any_of" in predicates or not all(
            isinstance(r, (list, tuple)) and len(r) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in r) for r in predicates.values()):
        return None
    return {k: pb.Range(low=float(lo), high=float(hi)) for k, (lo, hi) in predicates.items()}


def _filter(body: Json, where: str) -> tuple[dict[str, pb.Range], str]:
    """(predicates, filter_json) of a request: ranges as `Range`s, any other filter as JSON text."""
    preds = body.get("predicates", {})
    if not isinstance(preds, dict):
        raise InvalidSubscription("invalid_subscription", "predicates must be an object", f"{where}predicates")
    ranges = _ranges(preds)
    return (ranges, "") if ranges is not None else ({}, json.dumps(preds, separators=(",", ":")))


def subscribe_pb(body: Json, where: str = "") -> pb.SubscribeRequest:
    ranges, text = _filter(body, where)
    r = pb.SubscribeRequest(queue=body.get("queue") or "", predicates=ranges, filter_json=text)
    at = body.get("replay_from")
    if isinstance(at, int) and not isinstance(at, bool):
        r.replay_from_ms = at
    elif at is not None:
        r.replay_from = at if isinstance(at, str) else json.dumps(at)  # the server names what is not a time
    return r


def update_pb(sub_id: str, body: Json) -> pb.UpdateSubscriptionRequest:
    ranges, text = _filter(body, "")
    return pb.UpdateSubscriptionRequest(id=sub_id, predicates=ranges, filter_json=text)


def subscribe_batch_pb(bodies: list[Json]) -> pb.SubscribeBatchRequest:
    return pb.SubscribeBatchRequest(subscriptions=[subscribe_pb(b, f"subscriptions[{i}].")
                                                   for i, b in enumerate(bodies)])


def value_json(v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    return None if kind is None else getattr(v, kind)


def delivery_json(m: pb.Delivery) -> Json:
    """A Delivery as REST's JSON: its attributes of every type from `values` (a server that
    fills only `attributes`: those)."""
    attrs = {k: value_json(v) for k, v in m.values.items()} if m.values else dict(m.attributes)
    return {"id": m.id, "attributes": attrs, "payload": json.loads(m.payload) if m.payload else None,
            "subscriptions": list(m.subscriptions), "receipt": m.receipt, "published_at": m.published_at,
            **({"space": m.space} if m.space else {}), **({"replayed": True} if m.replayed else {})}


def _num(v: float) -> int | float:
    return int(v) if math.isfinite(v) and v.is_integer() else v


def space_json(s: pb.Space) -> Json:
    """GET /v1/space's JSON (a server that fills `dimensions` alone: those)."""
    dims = {"dimensions": [{"name": d.name, "min": _num(d.min), "max": _num(d.max)} for d in s.dimensions]}
    if not s.attributes:
        return dims
    attrs = [{"name": a.name, "type": a.type, **({"min": _num(a.min), "max": _num(a.max)} if a.type == "number"
                                                  else {}), **({"optional": True} if a.optional else {})}
             for a in s.attributes]
    return {"attributes": attrs, "partition": list(s.partition), **dims}


def subscription_json(s: pb.SubscriptionInfo) -> Json:
    """A SubscriptionInfo as REST's JSON: the filter as stored (`filter_json`; from a server
    that fills only `predicates`: the ranges)."""
    preds = json.loads(s.filter_json) if s.filter_json else {k: [r.low, r.high] for k, r in s.predicates.items()}
    out: Json = {"id": s.id, "queue": s.queue, "predicates": preds}
    if s.HasField("replay"):
        out["replay"] = replay_json(s.replay)
    return out


def replay_json(r: pb.Replay) -> Json:
    """A Replay as REST shows it: {from, position (null before its first step), done, delivered}."""
    return {"from": getattr(r, "from"), "position": r.position or None, "done": r.done, "delivered": r.delivered}


def reply_json(r: pb.SubscribeReply | pb.CreateQueueReply) -> Json:
    return {f.name: replay_json(v) if isinstance(v, pb.Replay) else v for f, v in r.ListFields()}


def seek_pb(queue: str, body: Json) -> pb.SeekRequest:
    """A seek's body ({"time": RFC 3339 text or epoch ms} or {"receipt": …}) as a SeekRequest."""
    if "receipt" in body:
        return pb.SeekRequest(queue=queue, receipt=body["receipt"])
    at = body.get("time")
    return pb.SeekRequest(queue=queue, time_ms=at) if isinstance(at, int) else pb.SeekRequest(queue=queue, time=at)
