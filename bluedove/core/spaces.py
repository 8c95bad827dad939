"""Named spaces: many attribute spaces in one cluster, each with its own schema, partition,
matcher count, retention and quotas (docs/design.md, "Spaces (in progress)").

A space's definition is a `SpaceSpec`, read from a `POST /v1/spaces` body by
`parse_space_spec`: `name` (`[a-z0-9-]{1,63}`), `attributes` and `partition` in the typed
form of bluedove/core/space.py, `matchers` (1..MAX_MATCHERS, or null: the cluster's choice),
`retention_s` (0..MAX_RETENTION_S, 0: none) and `quotas` (`subscriptions`, `messages_per_s`,
`bytes_per_s`, each optional, each above 0). A null optional field is the same as leaving it
out. Every fault is a 422 `invalid_space` whose `field` names the key (`name`,
`attributes[2].type`, `partition[0]`, `quotas.messages_per_s`, or the unknown key).

What counts as "the same" space, for a repeated create: the whole spec, in its canonical form
(`canonical()`: the JSON of `to_json()`, sorted keys, no spaces). That form spells every
default out (a number's type, the partition when it was left out, `retention_s` 0, null
`matchers`) and writes whole numbers as integers, so two bodies that say the same thing in
different words (`"min": 0` or `0.0`, `"type": "number"` or nothing) are the same, and
re-sending the identical body is a no-op. Anything else that differs is a conflict, the quotas
and the order of the attributes included: a create is not an update, and answering 200 to a
body whose quotas differ would tell the client its quotas were applied when they were not (the
order of the attributes is the order the space lists them, and a space of required numbers
cut in their order is the plain numeric space). `first_difference` names the first field that
differs, for the 409 to name.

Pure: no I/O; the registry is bluedove/store/spaces.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bluedove.core.attributes import finite_number, whole
from bluedove.core.errors import ApiError, echo
from bluedove.core.queue_bounds import MAX_RETENTION_S
from bluedove.core.space import Space, SpaceError, typed_space

SPACE_NAME = re.compile(r"[a-z0-9-]{1,63}")
DEFAULT_SPACE = "default"  # the space the routes without a space address
MAX_MATCHERS = 1_000
MAX_ATTRIBUTES = 64
MAX_SUBSCRIPTIONS = 1_000_000_000
FIELDS = ("name", "attributes", "partition", "matchers", "retention_s", "quotas")
QUOTAS = ("subscriptions", "messages_per_s", "bytes_per_s")


def bad(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_space", message, field)


def check_space_name(name: Any, field: str = "name") -> str:
    """`name` if it is a space name (1 to 63 characters of a-z, 0-9 and "-"); else a 422
    naming `field` (a body's `name`, or a route's `space`)."""
    if not isinstance(name, str) or SPACE_NAME.fullmatch(name) is None:
        raise bad(field, f"{field} must be 1 to 63 characters of a-z, 0-9 and '-', got {echo(name)}")
    return name


@dataclass(frozen=True)
class Quotas:
    """A space's quotas; None: no quota of that kind."""

    subscriptions: int | None = None
    messages_per_s: float | None = None
    bytes_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.subscriptions is not None:
            out["subscriptions"] = self.subscriptions
        for key, v in (("messages_per_s", self.messages_per_s), ("bytes_per_s", self.bytes_per_s)):
            if v is not None:
                out[key] = whole(v)
        return out


@dataclass(frozen=True)
class SpaceSpec:
    """A named space's definition: its schema and partition, matchers, retention and quotas."""

    name: str
    space: Space
    matchers: int | None = None  # None: the cluster decides
    retention_s: int = 0  # 0: none
    quotas: Quotas = field(default_factory=Quotas)

    def to_json(self) -> dict[str, Any]:
        """Every field, defaults spelt out: a `POST /v1/spaces` body that gives this spec back."""
        return {"name": self.name, "attributes": [a.to_json() for a in self.space.schema],
                "partition": list(self.space.names), "matchers": self.matchers,
                "retention_s": self.retention_s, "quotas": self.quotas.to_json()}

    def canonical(self) -> str:
        """The spec as one string: equal for two specs exactly when they are the same space."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, data: Any) -> "SpaceSpec":
        return parse_space_spec(data)


def default_spec(space: Space, retention_s: int = 0) -> SpaceSpec:
    """The `default` space: the cluster's own space (its --space file, and that file's
    `retention_s`), no quotas."""
    return SpaceSpec(DEFAULT_SPACE, space, retention_s=retention_s)


def first_difference(a: SpaceSpec, b: SpaceSpec) -> str | None:
    """The first field where `a` and `b` differ (`attributes[1]`, `quotas.bytes_per_s`); None
    when they are the same space."""
    ja, jb = a.to_json(), b.to_json()
    for key in FIELDS:
        x: object = ja[key]
        y: object = jb[key]
        if x == y:
            continue
        if isinstance(x, list) and isinstance(y, list):
            at = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            return f"{key}[{at}]"
        if isinstance(x, dict) and isinstance(y, dict):
            return f"{key}." + min(str(k) for k in x.keys() | y.keys() if x.get(k) != y.get(k))
        return key
    return None


def space_conflict(name: str, field: str) -> ApiError:
    """The 409 of a create whose body differs from the existing space's at `field`."""
    return ApiError(409, "conflict", f"space {name!r} exists with another {field} (delete it first, or send "
                    "the body it was created with)", field)


def parse_space_spec(body: Any) -> SpaceSpec:
    """The spec a `POST /v1/spaces` body asks for; a 422 `invalid_space` naming the field."""
    if not isinstance(body, dict):
        raise bad("body", "the body must be a JSON object")
    extra = sorted(str(k) for k in body if k not in FIELDS)
    if extra:
        raise bad(extra[0], f"unknown field {echo(extra[0])}; a space has {', '.join(FIELDS)}")
    if body.get("name") is None:
        raise bad("name", "name is required")
    name = check_space_name(body["name"])
    space = _space(body)
    matchers = _int(body, "matchers", 1, MAX_MATCHERS)
    retention = _int(body, "retention_s", 0, MAX_RETENTION_S)
    return SpaceSpec(name, space, matchers, retention or 0, _quotas(body.get("quotas")))


def load_spaces_file(path: str) -> list[SpaceSpec]:
    """The spaces a file declares (`bluedove dispatcher --spaces`, the chart's `spaces`): YAML or
    JSON, a list of `POST /v1/spaces` bodies (or `{"spaces": [...]}`). ValueError naming the file
    and the field (`spaces[1].quotas.messages_per_s`), a name given twice, or `default` (the
    cluster's own space, declared by --space)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    items = data.get("spaces") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a list of space definitions (or {{spaces: [...]}})")
    specs: list[SpaceSpec] = []
    for i, item in enumerate(items):
        try:
            spec = parse_space_spec(item)
        except ApiError as exc:  # (its message names its field first, or says it)
            said = exc.message if exc.message.startswith(str(exc.field)) else f"{exc.field}: {exc.message}"
            raise ValueError(f"{path}: spaces[{i}].{said}") from None
        if spec.name == DEFAULT_SPACE or spec.name in {s.name for s in specs}:
            why = "is the cluster's own space (--space)" if spec.name == DEFAULT_SPACE else "is declared twice"
            raise ValueError(f"{path}: spaces[{i}].name: {spec.name!r} {why}")
        specs.append(spec)
    return specs


def _space(body: dict[str, Any]) -> Space:
    items = body.get("attributes")
    if items is None:
        raise bad("attributes", "attributes is required: a list of {name, type, optional, min, max}")
    if isinstance(items, list) and len(items) > MAX_ATTRIBUTES:
        raise bad("attributes", f"a space has at most {MAX_ATTRIBUTES} attributes, got {len(items)}")
    try:
        return typed_space({"attributes": items, "partition": body.get("partition")})
    except SpaceError as exc:
        raise bad(exc.field or "attributes", str(exc)) from None


def _int(body: dict[str, Any], key: str, lo: int, hi: int, prefix: str = "") -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise bad(prefix + key, f"{prefix + key} must be an integer from {lo:,} to {hi:,}, got {echo(v)}")
    return v


def _rate(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if not finite_number(v) or v <= 0:
        raise bad(f"quotas.{key}", f"quotas.{key} must be a finite number above 0, got {echo(v)}")
    return float(v)


def _quotas(raw: Any) -> Quotas:
    if raw is None:
        return Quotas()
    if not isinstance(raw, dict):
        raise bad("quotas", "quotas must be an object {subscriptions, messages_per_s, bytes_per_s}")
    extra = sorted(str(k) for k in raw if k not in QUOTAS)
    if extra:
        raise bad(f"quotas.{extra[0]}", f"unknown quota {echo(extra[0])}; a space has {', '.join(QUOTAS)}")
    subs = _int(raw, "subscriptions", 1, MAX_SUBSCRIPTIONS, "quotas.")
    return Quotas(subs, _rate(raw, "messages_per_s"), _rate(raw, "bytes_per_s"))
