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

from bluedove.core.errors import ApiError
from bluedove.core.model import (
    _ID_RE,
    MAX_BATCH,
    MAX_PAYLOAD_BYTES,
    NotStrict,
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
    def payload(self) -> str: ...

    @property
    def id(self) -> str: ...


@dataclass
class Batch:
    """Validated messages: `ids[i]` the publisher's id or None, `points[i]` the values in space
    order, `payloads[i]` the payload's JSON text (b"null" when absent)."""

    ids: list[str | None]
    points: npt.NDArray[np.float64]  # (n, k)
    payloads: list[bytes]

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_parsed(cls, parsed: list[tuple[str | None, tuple[float, ...], Any]], k: int) -> "Batch":
        """From the slow path's [(id, point, payload)]."""
        points = np.array([p for _, p, _ in parsed], dtype=np.float64).reshape(len(parsed), k)
        payloads = [NULL if pl is None else strict_json(pl) for _, _, pl in parsed]  # checked by parse_message
        return cls([mid for mid, _, _ in parsed], points, payloads)

    @classmethod
    def concat(cls, parts: list["Batch"], k: int) -> "Batch":
        if len(parts) == 1:
            return parts[0]
        points = np.concatenate([p.points for p in parts]) if parts else np.empty((0, k))
        return cls([i for p in parts for i in p.ids], points, [x for p in parts for x in p.payloads])


class Decoder:
    """Decoders for one space's publish bodies (single messages and batches)."""

    def __init__(self, space: Space, max_batch: int = MAX_BATCH, max_payload: int = MAX_PAYLOAD_BYTES) -> None:
        self.space, self.max_batch, self.max_payload = space, max_batch, max_payload
        self.k = space.k
        self.lows = np.array([d.min for d in space.dimensions])
        self.highs = np.array([d.max for d in space.dimensions])
        fields = [f"f{i}" for i in range(self.k)]
        attrs = msgspec.defstruct("Attributes", [(f, float) for f in fields], forbid_unknown_fields=True,
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
        return Batch.from_parsed(parse_batch(body, self.space, self.max_batch, self.max_payload), self.k)

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
        return Batch.from_parsed([parse_message(loads_body(raw), self.space, prefix, self.max_payload)], self.k)

    def _checked(self, msgs: list[Any]) -> Batch | None:
        """The batch if every message passes the checks msgspec does not make, else None."""
        n, k = len(msgs), self.k
        if k == 1:
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
        return Batch(ids, points, payloads) if strict(payloads) else None

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
        n, k, names = len(msgs), self.k, self.space.names
        points = np.empty((n, k))
        ids: list[str | None] = []
        payloads: list[bytes] = []
        try:
            for i, m in enumerate(msgs):
                attrs = m.attributes
                if len(attrs) != k:
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
        where: Callable[[int], str] = (lambda i: "") if prefix is None else (lambda i: f"{prefix}[{start + i}].")
        parsed = [parse_message(pb_body(m, where(i)), self.space, where(i), self.max_payload)
                  for i, m in enumerate(msgs)]
        return Batch.from_parsed(parsed, k)


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


def pb_body(m: PbMessage, where: str) -> dict[str, Any]:
    """A gRPC Message in the REST body form, for the slow path's checks."""
    body: dict[str, Any] = {"attributes": dict(m.attributes)}
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


def loads_body(raw: bytes) -> Any:
    """A request body's JSON; 400 invalid_json when it is not JSON. Bytes that are not UTF-8
    inside a string are read as lone surrogates (surrogateescape): the field that holds them is
    then refused by name, and an error repeating them escapes them (ApiError.body)."""
    if not raw:
        return None
    try:
        # (UTF-16 and UTF-32 read as json.loads reads them)
        return loads(raw.decode(json.detect_encoding(raw), "surrogateescape"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body is JSON nested too deeply to read") from None
