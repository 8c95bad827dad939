"""Publish bodies decoded a batch at a time: straight from the request bytes into arrays.

A batch of 200 messages through `json.loads` and `bluedove.core.model.parse_message` costs the
dispatcher tens of µs per message: a dict per message and per attributes object, Python checks
per value, the payload parsed and serialised again. Here msgspec decodes the body in one pass
into structs made for the space (the dimension names are the only fields of `attributes`; a
payload stays the JSON text it arrived as, `msgspec.Raw`), and the checks run over the batch's
values at once (numpy). msgspec rather than orjson: it checks the shape while it decodes
(unknown fields, types, required dimensions) instead of building dicts to check afterwards.

Errors keep their contract exactly: whatever the fast path does not accept, the body goes
through the slow path (`bluedove.core.model`), which finds the first fault and names its field as
it always has. The fast path accepts a body only when the slow one would, with the same ids and
values; a payload is measured as the text it arrived in, which is never shorter than the slow
path's compact form unless it writes a number in exponent form (`1e5`, 100000.0 once parsed and
written again).

A payload must be strict JSON (docs/api.md, "Publishing"): msgspec already refuses NaN and a lone
surrogate escape in the text it skips, but not bytes that are not UTF-8, nor numbers past a
double or past 64 bits. The body is checked to be UTF-8 at once (most are ASCII: `bytes.isascii`), and the
payloads by `bluedove.core.model.suspect`, a C-speed pass that flags the few worth the exact
check (`check_text`). A payload it refuses sends the body to the slow path, which names it.

A typed space's `attributes` (docs/design.md, "Typed attributes") decode as a mapping, checked
by `bluedove.core.model.attribute_problem`; the batch carries each message's attributes as the
JSON text its stored body holds (`attributes_text`). A gRPC `Message` carries its attributes in
`attributes` (numbers) and `values` (a `Value` of any type): both merged into the REST body form
(`pb_body`), checked and stored exactly as REST's, so a message reads the same whichever way it
was published. A message with `values` takes the slow path.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import GenericAlias
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from bluedove.core.attributes import NUMBER
from bluedove.core.errors import ApiError, echo
from bluedove.core.model import (
    _ID_RE,
    MAX_BATCH,
    MAX_PAYLOAD_BYTES,
    NotStrict,
    attribute_problem,
    check_text,
    parse_batch,
    parse_message,
    strict_json,
    suspect,
)
from bluedove.core.space import Space

NULL = b"null"


class PbMessage(Protocol):
    """A gRPC message as the decoder reads it: a `Message`, or a `PublishStreamRequest` carrying one."""

    @property
    def attributes(self) -> Mapping[str, float]: ...

    @property
    def values(self) -> Mapping[str, Any]: ...

    @property
    def payload(self) -> str: ...

    @property
    def id(self) -> str: ...


@dataclass
class Batch:
    """Validated messages: `ids[i]` the publisher's id or None, `points[i]` the values in space
    order (a typed space's: the partition attributes' coordinates), `payloads[i]` the payload's
    JSON text (b"null" when absent), and in a typed space `attributes[i]` the attributes' JSON
    text (`attributes_text`; None in a space of numbers, whose bodies are made from `points`)."""

    ids: list[str | None]
    points: npt.NDArray[np.float64]  # (n, k)
    payloads: list[bytes]
    attributes: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_parsed(cls, parsed: list[tuple[str | None, tuple[float, ...], Any]], k: int,
                    attributes: list[bytes] | None = None) -> "Batch":
        """From the slow path's [(id, point, payload)] (and a typed space's attributes' texts)."""
        points = np.array([p for _, p, _ in parsed], dtype=np.float64).reshape(len(parsed), k)
        payloads = [NULL if pl is None else strict_json(pl) for _, _, pl in parsed]  # checked by parse_message
        return cls([mid for mid, _, _ in parsed], points, payloads, attributes)

    @classmethod
    def concat(cls, parts: list["Batch"], k: int) -> "Batch":
        if len(parts) == 1:
            return parts[0]
        points = np.concatenate([p.points for p in parts]) if parts else np.empty((0, k))
        attributes = None if not parts or parts[0].attributes is None else \
            [a for p in parts for a in p.attributes or ()]
        return cls([i for p in parts for i in p.ids], points, [x for p in parts for x in p.payloads], attributes)


_TEXT = msgspec.json.Encoder()


def attributes_text(attrs: Mapping[str, Any], space: Space) -> bytes:
    """A typed message's attributes (checked: `attribute_problem` found nothing) as its stored
    body holds them: in the space's order, those it carries (an optional one left out stays
    out), strings and booleans as given, a number as the double it reads as (5 is written 5.0,
    as in a space of numbers: docs/api.md, "Typed attributes")."""
    return _TEXT.encode({a.name: float(attrs[a.name]) if a.type == NUMBER else attrs[a.name]
                         for a in space.schema if a.name in attrs})


class Decoder:
    """Decoders for one space's publish bodies (single messages and batches)."""

    def __init__(self, space: Space, max_batch: int = MAX_BATCH, max_payload: int = MAX_PAYLOAD_BYTES) -> None:
        self.space, self.max_batch, self.max_payload = space, max_batch, max_payload
        self.k = space.k
        self.typed = space.typed
        self.lows = np.array([d.min for d in space.dimensions])
        self.highs = np.array([d.max for d in space.dimensions])
        fields = [f"f{i}" for i in range(self.k)]
        # a typed space's attributes: a mapping, checked by name and type afterwards (`_typed`)
        attrs: Any = dict[str, Any] if self.typed else msgspec.defstruct(
            "Attributes", [(f, float) for f in fields], forbid_unknown_fields=True,
            rename=dict(zip(fields, space.names)), array_like=False)
        message = msgspec.defstruct("Message", [("attributes", attrs), ("payload", msgspec.Raw, msgspec.Raw(NULL)),
                                                ("id", str | None, None)], forbid_unknown_fields=True)
        messages = GenericAlias(list, message)  # list[message], of a class made here
        batch = msgspec.defstruct("BatchBody", [("messages", messages)], forbid_unknown_fields=True)
        # structs made at run time: their fields are known to msgspec, not to the type checker
        self._one: msgspec.json.Decoder[Any] = msgspec.json.Decoder(message)
        self._many: msgspec.json.Decoder[Any] = msgspec.json.Decoder(batch)
        self._payload = msgspec.json.Decoder(msgspec.Raw)
        # an attributes struct's values in space order (used for k > 1: with one field it answers a scalar)
        self._values: Callable[[Any], Any] = operator.attrgetter(*fields)

    # -- REST bodies ----------------------------------------------------------------------------
    def batch(self, raw: bytes) -> Batch:
        """`POST /v1/messages:batch`'s body; ApiError naming the field when it is not valid."""
        try:
            msgs = self._many.decode(raw).messages
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            msgs = None
        if msgs is not None and 0 < len(msgs) <= self.max_batch and utf8(raw):
            out = self._checked(msgs)
            if out is not None:
                return out
        body = loads_body(raw)
        parsed = parse_batch(body, self.space, self.max_batch, self.max_payload)
        return self._slow(parsed, body["messages"])

    def one(self, raw: bytes, prefix: str = "") -> Batch:
        """`POST /v1/messages`'s body, as a batch of one."""
        try:
            msg = self._one.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            msg = None
        if msg is not None and utf8(raw):
            out = self._checked([msg])
            if out is not None:
                return out
        body = loads_body(raw)
        return self._slow([parse_message(body, self.space, prefix, self.max_payload)], [body])

    def _slow(self, parsed: list[tuple[str | None, tuple[float, ...], Any]], bodies: list[Any]) -> Batch:
        """The batch of the slow path's messages (`bodies`, each checked into `parsed`)."""
        texts = [attributes_text(b["attributes"], self.space) for b in bodies] if self.typed else None
        return Batch.from_parsed(parsed, self.k, texts)

    def _checked(self, msgs: list[Any]) -> Batch | None:
        """The batch if every message passes the checks msgspec does not make, else None."""
        n, k = len(msgs), self.k
        texts = None
        if self.typed:
            typed = self._typed(msgs)
            if typed is None:
                return None
            points, texts = typed
        elif k == 1:
            points = np.fromiter((m.attributes.f0 for m in msgs), np.float64, n).reshape(n, 1)
        else:
            get = self._values
            points = np.array([get(m.attributes) for m in msgs], dtype=np.float64).reshape(n, k)
        if not (np.isfinite(points).all() and (points >= self.lows).all() and (points < self.highs).all()):
            return None
        ids = [m.id for m in msgs]
        for mid in ids:
            if mid is not None and not _ID_RE.fullmatch(mid):
                return None
        payloads = [bytes(m.payload) for m in msgs]
        limit = self.max_payload
        for p in payloads:
            if len(p) > limit:
                return None
        return Batch(ids, points, payloads, texts) if strict(payloads) else None

    def _typed(self, msgs: list[Any]) -> tuple[npt.NDArray[np.float64], list[bytes]] | None:
        """A typed space's points (the partition attributes' coordinates) and attributes'
        texts; None when an attribute is wrong (the slow path names it)."""
        space = self.space
        cut = [space.by_name[name] for name in space.names]
        points = np.empty((len(msgs), self.k))
        texts = []
        for i, m in enumerate(msgs):
            attrs = m.attributes
            if attribute_problem(attrs, space) is not None:
                return None
            points[i] = [a.coordinate(attrs.get(a.name)) for a in cut]
            texts.append(attributes_text(attrs, space))
        return points, texts

    # -- gRPC messages --------------------------------------------------------------------------
    def pb_batch(self, msgs: Sequence[PbMessage]) -> Batch:
        """PublishBatch's messages: 1 to max_batch, checked whole."""
        if not msgs:
            raise ApiError(422, "invalid_message", "a batch needs at least one message", "messages")
        if len(msgs) > self.max_batch:
            raise ApiError(422, "invalid_message", f"a batch holds at most {self.max_batch} messages, got {len(msgs)}",
                           "messages")
        return self.messages(msgs)

    def messages(self, msgs: Sequence[PbMessage], prefix: str | None = "messages", start: int = 0) -> Batch:
        """gRPC `Message`s (attributes a map, payload JSON text); errors name
        `messages[i].field`, i counted from `start` (just `field` with no prefix: a single
        Publish)."""
        where: Callable[[int], str] = (lambda i: "") if prefix is None else (lambda i: f"{prefix}[{start + i}].")
        if self.typed:
            return self._pb_typed(msgs, where)
        n, k, names = len(msgs), self.k, self.space.names
        points = np.empty((n, k))
        ids: list[str | None] = []
        payloads: list[bytes] = []
        try:
            for i, m in enumerate(msgs):
                attrs = m.attributes
                if len(attrs) != k or m.values:  # (values: the slow path reads them)
                    raise KeyError
                points[i] = [attrs[x] for x in names]
                if len(attrs) != k:  # a name it lacked was read as 0.0 and added (a map's default): it has another
                    raise KeyError
                ids.append(m.id or None)
                p = m.payload.encode() if m.payload else NULL
                self._payload.decode(p)
                payloads.append(p)
            fast = np.isfinite(points).all() and (points >= self.lows).all() and (points < self.highs).all() \
                and all(mid is None or _ID_RE.fullmatch(mid) for mid in ids) \
                and all(len(p) <= self.max_payload for p in payloads) and strict(payloads)
        except (KeyError, msgspec.DecodeError, RecursionError):
            fast = False
        if fast:
            return Batch(ids, points, payloads)
        parsed = [parse_message(pb_body(m, where(i)), self.space, where(i), self.max_payload)
                  for i, m in enumerate(msgs)]
        return Batch.from_parsed(parsed, k)

    def _pb_typed(self, msgs: Sequence[PbMessage], where: Callable[[int], str]) -> Batch:
        """gRPC `Message`s in a typed space, through the slow path: each in the REST body form
        (`pb_body`), checked as REST checks it."""
        parsed, bodies = [], []
        for i, m in enumerate(msgs):
            at = where(i)
            body = pb_body(m, at)
            parsed.append(parse_message(body, self.space, at, self.max_payload))
            bodies.append(body)
        return self._slow(parsed, bodies)


def utf8(raw: bytes) -> bool:
    """Whether a body is UTF-8 (msgspec checks its strings, not the payloads it skips)."""
    if raw.isascii():
        return True
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def strict(payloads: list[bytes]) -> bool:
    """Whether every payload (JSON text, UTF-8) is strict JSON: the prefilter over them all at
    once, the exact check only on those it flags."""
    if not suspect(b" ".join(payloads)):
        return True
    try:
        for p in payloads:
            if suspect(p):
                check_text(p)
    except NotStrict:
        return False
    return True


def pb_value(v: Any, where: str) -> Any:
    """A gRPC `Value` as the JSON value it stands for (a number a float, as a double reads)."""
    kind = v.WhichOneof("kind")
    if kind is None:
        raise ApiError(422, "invalid_message", "a Value needs one of number, text or flag", where)
    return getattr(v, kind)


def pb_attributes(m: PbMessage, where: str) -> dict[str, Any]:
    """A gRPC Message's `attributes` and `values` as one mapping: a name in both is refused."""
    attrs: dict[str, Any] = dict(m.attributes)
    for name, v in m.values.items():
        at = f"{where}attributes.{name}"
        if name in attrs:
            raise ApiError(422, "invalid_message", f"{echo(name)} is given in both attributes and values: give it "
                           "once", at)
        attrs[name] = pb_value(v, at)
    return attrs


def pb_body(m: PbMessage, where: str) -> dict[str, Any]:
    """A gRPC Message in the REST body form, for the slow path's checks."""
    body: dict[str, Any] = {"attributes": pb_attributes(m, where) if m.values else dict(m.attributes)}
    if m.payload:
        try:
            body["payload"] = loads(m.payload)
        except (ValueError, RecursionError) as exc:  # (RecursionError: nested too deeply to read)
            raise ApiError(422, "invalid_message", f"payload must be JSON text: {exc}", f"{where}payload") from None
    if m.id:
        body["id"] = m.id
    return body


class LongInt:
    """What a body's parser leaves in place of an integer too long for Python to read (over
    4,300 digits): the checks then name its field ("value must be a finite number, got an
    integer of 5000 digits") where the parser alone would refuse the whole body."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def long_int(text: str) -> int | LongInt:
    try:
        return int(text)
    except ValueError:  # over sys.get_int_max_str_digits()
        return LongInt(len(text.lstrip("-")))


def loads(text: str) -> Any:
    """JSON text read as json.loads does, an integer too long to read left as a LongInt.
    (json.loads would refuse the whole text; it is parsed again only then: at no cost otherwise.)"""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        return json.loads(text, parse_int=long_int)


_DECODE = msgspec.json.Decoder().decode


def loads_body(raw: bytes) -> Any:
    """A request body's JSON; 400 invalid_json when it is not JSON. Bytes that are not UTF-8
    inside a string are read as lone surrogates (surrogateescape): the field that holds them is
    then refused by name, and an error repeating them escapes them (ApiError.body)."""
    if not raw:
        return None
    try:  # msgspec first: ~4x json.loads on a :batch of 1,000 subscriptions, the same values
        return _DECODE(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # NaN, 1e400, a long int,
        pass  # not UTF-8, too deep...: read as before
    try:
        # (UTF-16 and UTF-32 read as json.loads reads them)
        return loads(raw.decode(json.detect_encoding(raw), "surrogateescape"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body is JSON nested too deeply to read") from None
