"""The public gRPC API's messages and the REST API's JSON, each way: a delivery's attributes
(`Delivery.attributes` the numbers, `Delivery.values` every one, of its type) and a
subscription's filter (a map of `Range`s, or the filter language as JSON text in `filter_json`,
exactly the REST `predicates` object: docs/api.md, "gRPC")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from grpc.aio import ServicerContext

from bluedove.core.errors import ApiError
from bluedove.core.model import Subscription, only_ranges
from bluedove.core.space import Space
from bluedove.v1 import pubsub_pb2 as pb


def delivery_pb(m: dict[str, Any]) -> pb.Delivery:
    """A stored delivery (the REST JSON of one): its attributes in `values` as published, the
    numbers also in `attributes` (what a client of a space of numbers has always read)."""
    payload = m.get("payload")
    d = pb.Delivery(id=m["id"], subscriptions=m["subscriptions"],
                    payload="" if payload is None else json.dumps(payload, separators=(",", ":")),
                    receipt=m["receipt"], published_at=m.get("published_at", ""), space=m.get("space", ""),
                    replayed=m.get("replayed") is True)
    numbers, values = d.attributes, d.values
    for name, v in m["attributes"].items():
        if isinstance(v, bool):
            values[name].flag = v
        elif isinstance(v, str):
            values[name].text = v
        else:
            values[name].number = v
            numbers[name] = v
    return d


def filter_of(predicates: Mapping[str, pb.Range], filter_json: str, where: str = "") -> Any:
    """The REST `predicates` of a request's `Range` map or its `filter_json` (not both: 422
    naming `<where>filter_json`)."""
    if not filter_json:
        return {k: [x.low, x.high] for k, x in predicates.items()}
    at = f"{where}filter_json"
    if predicates:
        raise ApiError(422, "invalid_subscription", "the filter goes in predicates (ranges) or in filter_json, "
                       "not both", at)
    try:
        out = json.loads(filter_json)
    except (ValueError, RecursionError) as exc:
        raise ApiError(422, "invalid_subscription", f"filter_json must be JSON text: {exc}", at) from None
    if not isinstance(out, dict):
        raise ApiError(422, "invalid_subscription", "filter_json must be a JSON object mapping attribute names to "
                       "conditions (the REST predicates)", at)
    return out


def subscription_json(r: pb.SubscribeRequest, where: str = "") -> dict[str, Any]:
    """A pb.SubscribeRequest in the REST body form, for the shared validation."""
    body: dict[str, Any] = {"predicates": filter_of(r.predicates, r.filter_json, where)}
    if r.queue:
        body["queue"] = r.queue
    which = r.WhichOneof("replay")
    if which is not None:
        body["replay_from"] = getattr(r, which)
    return body


def replay_pb(replay: dict[str, Any] | None) -> pb.Replay | None:
    """A subscription's replay as the REST answer shows it, as gRPC's Replay (None: it has none)."""
    if replay is None:
        return None
    return pb.Replay(**{"from": replay["from"]}, position=replay.get("position") or "",
                     done=bool(replay.get("done")), delivered=int(replay.get("delivered", 0)))


def one_box(sub: dict[str, Any], space: Space) -> dict[str, Any] | None:
    """A stored subscription's predicates as gRPC's ranges: one given in other terms (bounds,
    equals) as its one box; None when its filter is more than one box."""
    predicates: dict[str, Any] = sub["predicates"]
    if only_ranges(predicates):
        return predicates
    built = Subscription.from_json(sub, space)
    if built.filter is not None and not built.void:
        return None
    return dict(built.predicates_as_ranges(space))


def subscription_info(sub: dict[str, Any], space: Space) -> pb.SubscriptionInfo:
    """A stored subscription (its REST JSON) as a SubscriptionInfo: the filter as stored in
    `filter_json`, and as ranges in `predicates` when it is one box."""
    ranges = one_box(sub, space) or {}
    return pb.SubscriptionInfo(id=sub["id"], queue=sub["queue"],
                               predicates={name: pb.Range(low=lo, high=hi) for name, (lo, hi) in ranges.items()},
                               filter_json=json.dumps(sub["predicates"], separators=(",", ":"), ensure_ascii=False),
                               replay=replay_pb(sub.get("replay")))


def metadata(context: ServicerContext[Any, Any], name: str) -> str | None:
    """A call's metadata value `name` (a text key's value is a str; only a `-bin` key's is bytes)."""
    return next((value for key, value in context.invocation_metadata() or () if key == name and isinstance(value, str)),
                None)
