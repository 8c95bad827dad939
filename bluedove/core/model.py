"""Subscriptions and messages: validation of API input into normalised, exact forms.

Matching semantics (docs/design.md, "Model"): message m matches subscription S iff
`low_d <= m_d < high_d` for every dimension d that S constrains. A dimension a
subscription leaves out is a wildcard, stored as the whole range of the space.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, NoReturn

from bluedove.core.errors import ApiError, echo
from bluedove.core.filter_syntax import range_bounds
from bluedove.core.filters import Box, Filter, box_key, parse_filter
from bluedove.core.space import Space

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_BATCH = 1000
_ID_RE = re.compile(r"[A-Za-z0-9._:~-]{1,128}")  # used with fullmatch: `$` would pass "id\n"


@dataclass(frozen=True)
class Subscription:
    """A validated subscription: one box, `lows`/`highs` over every dimension (wildcards = the
    space); or, for a filter the box cannot say exactly (docs/design.md, "Typed attributes"),
    its `filter`: the boxes the index holds and the check after it, `lows`/`highs` then their
    bounds."""

    id: str
    queue: str
    # As stored and shown: {dim: (low, high)} clipped to the space, or the filter as given.
    predicates: dict[str, Any]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    filter: Filter | None = None

    def named(self, sub_id: str, queue: str) -> "Subscription":
        """The same with this id and queue (dataclasses.replace, at a third of its cost)."""
        return Subscription(sub_id, queue, self.predicates, self.lows, self.highs, self.filter)

    @property
    def boxes(self) -> tuple[Box, ...]:
        """The boxes the index holds for it (none when it can match nothing)."""
        if self.filter is not None:
            return self.filter.boxes
        return () if self.void else ((self.lows, self.highs),)

    @property
    def void(self) -> bool:
        """True when it can match nothing (clipping left an empty range, or no box is left)."""
        if self.filter is not None:
            return not self.filter.boxes
        return any(lo >= hi for lo, hi in zip(self.lows, self.highs))

    def matches(self, point: tuple[float, ...] | list[float]) -> bool:
        """Whether `point` is in one of its boxes (for a filter, what the index answers)."""
        return any(all(lo <= v < hi for lo, v, hi in zip(lows, point, highs)) for lows, highs in self.boxes)

    def rows(self) -> list[tuple[str, tuple[float, ...], tuple[float, ...]]]:
        """Its index entries: (key, lows, highs) per box; a plain one's key is its id, a box of
        a filter's `box_key(id, i)`, so that a matcher knows to check and count it once."""
        if self.filter is None:
            return [(self.id, *box) for box in self.boxes]
        return [(box_key(self.id, i), *box) for i, box in enumerate(self.filter.boxes)]

    def predicates_as_ranges(self, space: Space) -> dict[str, list[float]]:
        """Its one box as {dim: [low, high]} on the dimensions it constrains; for one that can
        match nothing, an empty range. ValueError for a filter of several boxes."""
        if self.void:
            first = space.dimensions[0]
            return {first.name: [first.min, first.min]}
        if self.filter is not None:
            raise ValueError(f"subscription {self.id} has a filter of {len(self.filter.boxes)} boxes, not one box")
        return {d.name: [lo, hi] for d, lo, hi in zip(space.dimensions, self.lows, self.highs)
                if lo > d.min or hi < d.max}

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "predicates": {d: list(v) if isinstance(v, tuple) else v for d, v in self.predicates.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], space: Space) -> "Subscription":
        """Rebuild from the catalogue form (already validated when it was stored)."""
        return build_subscription(data["id"], data["queue"], data["predicates"], space)


def build_subscription(sub_id: str, queue: str, predicates: dict[str, Any], space: Space) -> Subscription:
    """The subscription of `predicates`; raises ApiError naming the field. A filter of ranges
    {dim: [low, high]} in a space of numbers is clipped to the space, one box; any other goes
    through the filter language (bluedove/core/filters.py), one box when that says exactly."""
    if not isinstance(predicates, dict):
        raise ApiError(422, "invalid_subscription", "predicates must be an object mapping attribute names to "
                       "conditions", "predicates")
    if space.typed or not only_ranges(predicates):
        f = parse_filter(predicates, space)
        if f.exact and len(f.boxes) == 1:
            return Subscription(sub_id, queue, predicates, *f.boxes[0])
        if f.boxes:
            lows = tuple(min(b[0][i] for b in f.boxes) for i in range(space.k))
            highs = tuple(max(b[1][i] for b in f.boxes) for i in range(space.k))
        else:
            lows = highs = tuple(d.min for d in space.dimensions)
        return Subscription(sub_id, queue, predicates, lows, highs, f)
    return _ranges(sub_id, queue, predicates, space)


def only_ranges(predicates: dict[str, Any]) -> bool:
    """Whether `predicates` are `{dim: [low, high]}` only (no other condition, no any_of)."""
    for v in predicates.values():  # (a loop: a generator's frame cost more than the check)
        if not isinstance(v, list):
            return False
    return "any_of" not in predicates


def _ranges(sub_id: str, queue: str, predicates: dict[str, Any], space: Space) -> Subscription:
    """A filter of ranges in a space of numbers, clipped to the space: one box. Each range is
    read as it usually comes (a known dimension, two plain numbers, low below high) without
    building its error's field name; anything else goes through `_checked`, which names it."""
    dims, positions = space.dimensions, space.positions
    lows = [d.min for d in dims]
    highs = [d.max for d in dims]
    clipped: dict[str, tuple[float, float]] = {}
    for name, rng in predicates.items():
        i = positions.get(name)
        if i is None or len(rng) != 2 or not (_plain(rng[0]) and _plain(rng[1]) and rng[0] < rng[1]):
            i, (lo, hi) = _checked(name, rng, space)
        else:
            lo, hi = rng
        dim = dims[i]
        lo_c, hi_c = max(float(lo), dim.min), min(float(hi), dim.max)
        clipped[name] = (lo_c, hi_c)
        lows[i], highs[i] = lo_c, hi_c
    return Subscription(sub_id, queue, clipped, tuple(lows), tuple(highs))


_EXACT_INT = 2 ** 53  # an int within this is a double exactly


def _plain(v: Any) -> bool:
    """A finite float, or an int a double holds exactly (not a bool): what `range_bounds`
    accepts, in its common cases (it decides the rest)."""
    t = type(v)
    return (t is float and v - v == 0.0) or (t is int and -_EXACT_INT <= v <= _EXACT_INT)


def _checked(name: str, rng: list[Any], space: Space) -> tuple[int, tuple[float, float]]:
    """A range's dimension and bounds, or the ApiError naming what is wrong with it."""
    where = f"predicates.{name}"
    try:
        i = space.index(name)
    except ValueError:
        raise ApiError(422, "invalid_subscription", f"unknown dimension {echo(name)}; the space has "
                       f"{list(space.names)}", where) from None
    return i, range_bounds(rng, where)


_FIELDS = frozenset({"queue", "predicates"})


def parse_subscription_request(body: Any, prefix: str = "") -> tuple[str | None, dict[str, Any]]:
    """Check the shape of a POST /v1/subscriptions body; returns (queue or None, predicates).
    `prefix` goes before the field an error names (`subscriptions[3].` in a batch)."""
    if not isinstance(body, dict):
        what = "a subscription" if prefix else "the body"
        raise ApiError(422, "invalid_subscription", f"{what} must be a JSON object", prefix.rstrip(".") or None)
    unknown = set() if body.keys() <= _FIELDS else set(body) - _FIELDS
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(422, "invalid_subscription", f"unknown field {echo(name)}", f"{prefix}{name}")
    queue = body.get("queue")
    if queue is not None and not isinstance(queue, str):
        raise ApiError(422, "invalid_subscription", "queue must be a string", f"{prefix}queue")
    if "predicates" not in body:
        raise ApiError(422, "invalid_subscription", "predicates is required (use {} to match everything)",
                       f"{prefix}predicates")
    return queue, body["predicates"]


def parse_subscription_batch(body: Any, space: Space,
                             max_batch: int = MAX_BATCH) -> list[tuple[str | None, Subscription]]:
    """Validate a whole POST /v1/subscriptions:batch body before anything is stored (all or
    nothing); returns [(queue or None, subscription with an empty id and queue)] in order.
    Errors name the field, as `subscriptions[3].predicates.x2[1]`."""
    def bad(msg: str, where: str) -> ApiError:
        return ApiError(422, "invalid_subscription", msg, where)

    if not isinstance(body, dict):
        raise bad("the body must be {\"subscriptions\": [...]}", "subscriptions")
    unknown = set(body) - {"subscriptions"}
    if unknown:
        name = sorted(unknown)[0]
        raise bad(f"unknown field {echo(name)}", name)
    items = body.get("subscriptions")
    if not isinstance(items, list):
        raise bad("the body must be {\"subscriptions\": [...]}", "subscriptions")
    if not items:
        raise bad("a batch needs at least one subscription", "subscriptions")
    if len(items) > max_batch:
        raise bad(f"a batch holds at most {max_batch} subscriptions, got {len(items)}", "subscriptions")
    out = []
    for i, item in enumerate(items):
        try:
            queue, predicates = parse_subscription_request(item, _SOME_ITEM)
            out.append((queue, build_subscription("", "", predicates, space)))
        except ApiError:
            _item_error(i, item, space)
    return out


_SOME_ITEM = "subscriptions[]."  # (a batch item's errors are made again by `_item_error`, naming it)


def _item_error(i: int, item: Any, space: Space) -> NoReturn:
    """Raise the ApiError of batch item `i`, naming its field (`subscriptions[3].predicates.x`):
    the error is made here, once, rather than each item's field names ahead of it."""
    prefix = f"subscriptions[{i}]."
    _, predicates = parse_subscription_request(item, prefix)
    try:
        build_subscription("", "", predicates, space)
    except ApiError as exc:
        raise ApiError(exc.status, exc.code, exc.message, f"{prefix}{exc.field}") from None
    raise AssertionError("a batch item failed once and then passed")


# -- strict JSON payloads (docs/api.md, "Publishing") ---------------------------------------------
# A payload is relayed to every subscriber as JSON text, so it must be JSON that strict parsers
# read back: UTF-8 without lone surrogates, numbers that are finite doubles, integers within 64
# bits (typed parsers read at most an int64 or a uint64; Python's json refuses over 4,300 digits).
INT_MIN, INT_MAX = -(2**63), 2**64 - 1
NOT_UNICODE = "payload must be valid Unicode: a lone surrogate (\\ud800-\\udfff unpaired) or bytes that are not UTF-8"
NOT_FINITE = "payload numbers must be finite doubles: NaN, Infinity and numbers past a double's range (1e400) are not"
NOT_INT64 = "payload integers must be within 64 bits, -2**63 to 2**64-1 (send a larger one as a string)"
TOO_DEEP = "payload is JSON nested too deeply to read"

# The prefilter's alphabet: every digit and "-" read "0", "E" reads "e"; "+" is dropped. So an
# integer past 64 bits reads as 20 zeros (-9223372036854775809 too), and a number past a double
# has 20 digits before its point or an exponent of 3 digits (1e+400 reads 0e000). The digits
# after a point rarely make 20: a double's repr has 17 at most, after at most 3 zeros
# (0.000123...) before it writes an exponent. The exponent is searched by `re` (a needle ending
# in zeros makes `in` slow on a text of numbers).
_FOLD = bytes.maketrans(b"0123456789-E", b"00000000000e")
_EXPONENT = re.compile(rb"e000")


class NotStrict(ValueError):
    """JSON text or a value strict JSON parsers would not read back; the message says why."""


def suspect(text: bytes) -> bool:
    """False when the numbers of `text` (JSON text) are surely all strict (no run of 20 digits, no
    exponent of 3 digits): one translate and two searches, C speed. True when they may not be:
    the exact check (`check_text`) is then worth its cost. (A lone surrogate escape is not its
    concern: msgspec refuses one even in the text it skips, and `strict_json` cannot encode one.)"""
    folded = text.translate(_FOLD, b"+")
    return b"0" * 20 in folded or _EXPONENT.search(folded) is not None


def _int64(text: str) -> int:
    value = int(text) if len(text) <= 21 else None  # a longer one is out of range (or has zeros ahead, not JSON)
    if value is None or not INT_MIN <= value <= INT_MAX:
        raise NotStrict(NOT_INT64)
    return value


def _double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStrict(NOT_FINITE)
    return value


def _constant(text: str) -> NoReturn:  # NaN, Infinity, -Infinity: Python's json reads them, JSON has none
    raise NotStrict(NOT_FINITE)


_STRICT = json.JSONDecoder(parse_int=_int64, parse_float=_double, parse_constant=_constant)


def check_text(text: bytes) -> None:
    """Raise NotStrict unless the numbers of `text` (JSON text, without lone surrogate escapes:
    msgspec read it, or `strict_json` wrote it) are strict: finite doubles, 64-bit integers, no
    NaN or Infinity. The exact check, for what `suspect` flags."""
    try:
        _STRICT.decode(text.decode())
    except UnicodeDecodeError:
        raise NotStrict(NOT_UNICODE) from None
    except RecursionError:
        raise NotStrict(TOO_DEEP) from None
    except json.JSONDecodeError as exc:
        raise NotStrict(f"payload must be JSON text: {exc}") from None


def _not_json(value: Any) -> NoReturn:
    # what a body's parser left in place of an integer too long to read (bluedove/dispatcher/publish/decode.py)
    raise NotStrict(f"{NOT_INT64}; got {echo(value)}")


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_not_json)


def strict_json(payload: Any) -> bytes:
    """`payload`'s compact JSON text (UTF-8, not \\u-escaped): the form the slow path stores and
    measures. NotStrict when strict parsers could not read it back."""
    try:
        text = _COMPACT.encode(payload).encode()
    except UnicodeEncodeError:
        raise NotStrict(NOT_UNICODE) from None
    except RecursionError:
        raise NotStrict(TOO_DEEP) from None
    except NotStrict:
        raise
    except ValueError:  # allow_nan=False: a NaN or an infinity
        raise NotStrict(NOT_FINITE) from None
    if suspect(text):
        check_text(text)  # its integers, exactly
    return text


def parse_message(body: Any, space: Space, prefix: str = "",
                  max_payload: int = MAX_PAYLOAD_BYTES) -> tuple[str | None, tuple[float, ...], Any]:
    """Validate one message body; returns (id or None, point, payload). Errors name the field."""

    def bad(msg: str, where: str, status: int = 422, code: str = "invalid_message") -> ApiError:
        return ApiError(status, code, msg, f"{prefix}{where}" if where else prefix.rstrip(".") or None)

    if not isinstance(body, dict):
        raise bad("a message must be a JSON object", "")
    unknown = set(body) - {"attributes", "payload", "id"}
    if unknown:
        name = sorted(unknown)[0]
        raise bad(f"unknown field {echo(name)}", name)
    msg_id = body.get("id")
    if msg_id is not None and (not isinstance(msg_id, str) or not _ID_RE.fullmatch(msg_id)):
        raise bad("id must be 1-128 characters of A-Z a-z 0-9 . _ : ~ -", "id")
    attrs = body.get("attributes")
    if not isinstance(attrs, dict):
        raise bad("attributes must be an object with a value for every dimension", "attributes")
    problem = attribute_problem(attrs, space)
    if problem is not None:
        raise bad(problem[1], f"attributes.{problem[0]}")
    point = tuple(space.by_name[d.name].coordinate(attrs.get(d.name)) for d in space.dimensions)
    try:
        size = len(strict_json(body.get("payload")))
    except NotStrict as exc:
        raise bad(str(exc), "payload") from None
    if size > max_payload:
        raise bad(f"payload is {size} bytes; the limit is {max_payload}", "payload", 413, "payload_too_large")
    return msg_id, point, body.get("payload")


def attribute_problem(attrs: dict[str, Any], space: Space) -> tuple[str, str] | None:
    """(attribute, why) of the first attribute of a message wrong for `space`; None: all right."""
    for name in attrs:
        if name not in space.by_name:
            return name, f"unknown attribute {echo(name)}; the space has {[a.name for a in space.schema]}"
    for a in space.schema:
        if a.name not in attrs:
            if not a.optional:
                return a.name, f"missing attribute {a.name!r}: it is required"
            continue
        why = a.problem(attrs[a.name])
        if why is not None:
            return a.name, f"{a.name} is a {a.type}: {echo(attrs[a.name])} {why}"
    return None


def parse_batch(body: Any, space: Space, max_batch: int = MAX_BATCH,
                max_payload: int = MAX_PAYLOAD_BYTES) -> list[tuple[str | None, tuple[float, ...], Any]]:
    """Validate a whole batch before anything is published (docs/api.md: all or nothing)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise ApiError(422, "invalid_message", "the body must be {\"messages\": [...]}", "messages")
    unknown = set(body) - {"messages"}
    if unknown:  # as in a message: a field we do not know is an error, not silently dropped
        name = sorted(unknown)[0]
        raise ApiError(422, "invalid_message", f"unknown field {echo(name)}", name)
    msgs = body["messages"]
    if not msgs:
        raise ApiError(422, "invalid_message", "a batch needs at least one message", "messages")
    if len(msgs) > max_batch:
        raise ApiError(422, "invalid_message", f"a batch holds at most {max_batch} messages, got {len(msgs)}",
                       "messages")
    return [parse_message(m, space, f"messages[{i}].", max_payload) for i, m in enumerate(msgs)]
