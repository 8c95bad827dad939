"""The attribute space: its attributes, and the ordered dimensions mPartition cuts.

A space of numbers only, every one required and cut (the form `{"dimensions": [...]}`), is
its dimensions, each a half-open range [min, max). A typed space (`{"attributes": [...],
"partition": [...]}`, docs/design.md "Typed attributes") has numbers, strings and booleans,
required or optional; its dimensions are its partition attributes, each on the coordinates
bluedove/core/attributes.py gives it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from bluedove.core.attributes import NUMBER, TYPES, Attribute, finite_number, whole
from bluedove.core.queue_bounds import MAX_RETENTION_S


class SpaceError(ValueError):
    """A space definition that cannot be used; the message names the offending key, and of the
    typed form `field` is that key's path (`attributes[2].type`), for an API error to name."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Dimension:
    """One named dimension of the space: the half-open range [min, max)."""

    name: str
    min: float
    max: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "min": _num(self.min), "max": _num(self.max)}


@dataclass(frozen=True)
class Space:
    """The attribute space: its dimensions, in order, and for a typed space its attributes."""

    dimensions: tuple[Dimension, ...]
    attributes: tuple[Attribute, ...] = ()  # none: the dimensions, numbers, all required

    @property
    def k(self) -> int:
        return len(self.dimensions)

    @property
    def typed(self) -> bool:
        return bool(self.attributes)

    @cached_property
    def schema(self) -> tuple[Attribute, ...]:
        """Every attribute of the space (of a space of numbers only: its dimensions)."""
        return self.attributes or tuple(Attribute(d.name, NUMBER, False, d.min, d.max) for d in self.dimensions)

    @cached_property
    def by_name(self) -> dict[str, Attribute]:
        return {a.name: a for a in self.schema}

    @classmethod
    def of(cls, attributes: tuple[Attribute, ...], partition: tuple[str, ...]) -> "Space":
        """The space of `attributes` whose dimensions are the `partition` attributes, in order;
        a space of required numbers, all cut in order, is the plain one."""
        by_name = {a.name: a for a in attributes}
        dims = tuple(Dimension(n, by_name[n].low, by_name[n].high) for n in partition)
        plain = (all(a.type == NUMBER and not a.optional for a in attributes)
                 and partition == tuple(a.name for a in attributes))
        return cls(dims, () if plain else attributes)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @cached_property
    def positions(self) -> dict[str, int]:
        """Dimension name -> its position (read-only by convention)."""
        return {name: i for i, name in enumerate(self.names)}

    def index(self, name: str) -> int:
        """The position of dimension `name`; ValueError if the space has none of that name.
        (Once per predicate of every subscription: a dict, built once.)"""
        try:
            return self.positions[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a dimension of the space") from None

    def to_json(self) -> dict[str, Any]:
        """A space of numbers only as `{"dimensions"}`; a typed one with its attributes and
        partition, and `dimensions` its partition dimensions (their coordinates)."""
        dims = {"dimensions": [d.to_json() for d in self.dimensions]}
        if not self.typed:
            return dims
        return {"attributes": [a.to_json() for a in self.attributes],
                "partition": [d.name for d in self.dimensions], **dims}

    def api_json(self) -> dict[str, Any]:
        """GET /v1/space: every space in the typed form, with `dimensions` for older clients."""
        return {"attributes": [a.to_json() for a in self.schema], "partition": [d.name for d in self.dimensions],
                "dimensions": [d.to_json() for d in self.dimensions]}

    @classmethod
    def from_json(cls, data: object) -> "Space":
        if isinstance(data, dict) and "attributes" in data:
            return typed_space(data)
        if not isinstance(data, dict) or not isinstance(data.get("dimensions"), list):
            raise SpaceError("space: expected a mapping with a list 'attributes' (or 'dimensions')")
        for key in data:
            if key != "dimensions":  # a misspelt setting must not be ignored silently
                raise SpaceError(f"{key}: unknown key; a space has 'attributes' and 'partition' (or 'dimensions')")
        dims = []
        for i, d in enumerate(data["dimensions"]):
            where = f"dimensions[{i}]"
            if not isinstance(d, dict):
                raise SpaceError(f"{where}: expected a mapping with name, min, max")
            for key in d:
                if key not in ("name", "min", "max"):
                    raise SpaceError(f"{where}.{key}: unknown key; a dimension has name, min, max")
            name = d.get("name")
            if not isinstance(name, str) or not name.isidentifier():
                raise SpaceError(f"{where}.name: expected an identifier, got {name!r}")
            lo: Any = d.get("min")
            hi: Any = d.get("max")
            for key, v in (("min", lo), ("max", hi)):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise SpaceError(f"{where}.{key}: expected a finite number, got {v!r}")
            if not lo < hi:
                raise SpaceError(f"{where}: min ({lo}) must be below max ({hi})")
            dims.append(Dimension(name, float(lo), float(hi)))
        if not dims:
            raise SpaceError("space: at least one dimension is required")
        names = [d.name for d in dims]
        if len(set(names)) != len(names):
            raise SpaceError(f"space: dimension names must be unique, got {names}")
        return cls(tuple(dims))


def default_space() -> Space:
    """The paper's space: four dimensions x0..x3, each [0, 1000)."""
    return Space(tuple(Dimension(f"x{i}", 0.0, 1000.0) for i in range(4)))


def load_space(path: str | Path | None) -> Space:
    """Read a space file, YAML or JSON: `attributes` and `partition` (a typed space), or
    `dimensions: [{name, min, max}, ...]`; None gives the default."""
    return default_space() if path is None else read_space_file(path)[0]


def read_space_file(path: str | Path) -> tuple[Space, int | None]:
    """A space file's space, and its `retention_s` (the cluster's own space's log, docs/api.md
    "Replay"; whole seconds, 0 to a year; None when the file leaves it out)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpaceError(f"{path}: {exc}") from exc
    retention = None
    if isinstance(data, dict) and "retention_s" in data:
        data = dict(data)
        retention = data.pop("retention_s")
        if isinstance(retention, bool) or not isinstance(retention, int) or not 0 <= retention <= MAX_RETENTION_S:
            raise SpaceError(f"retention_s: expected whole seconds from 0 to {MAX_RETENTION_S}, got {retention!r}",
                             "retention_s")
    return Space.from_json(data), retention


_num = whole


def _bad(field: str, text: str) -> SpaceError:
    return SpaceError(f"{field}: {text}", field)


def typed_space(data: dict[str, Any]) -> Space:
    """A space in the typed form: attributes, partition (default: every attribute, when all are
    numbers), and optionally `dimensions`, which must be what they give (GET /v1/space's). A
    fault is a SpaceError whose `field` names the key (a request body's, bluedove/core/spaces.py)."""
    for key in data:
        if key not in ("attributes", "partition", "dimensions"):
            raise _bad(key, "unknown key; a space has 'attributes' and 'partition'")
    items = data["attributes"]
    if not isinstance(items, list) or not items:
        raise _bad("attributes", "expected a list of at least one attribute")
    attrs = tuple(_attribute(a, f"attributes[{i}]") for i, a in enumerate(items))
    names = [a.name for a in attrs]
    if len(set(names)) != len(names):
        raise _bad("attributes", f"names must be unique, got {names}")
    partition = data.get("partition")
    if partition is None:
        if any(a.type != NUMBER for a in attrs):
            raise _bad("partition", "required when an attribute is not a number (name the attributes to cut)")
        partition = names
    if not isinstance(partition, list) or not partition or not all(isinstance(p, str) for p in partition):
        raise _bad("partition", "expected a list of at least one attribute name")
    for i, p in enumerate(partition):
        if p not in names:
            raise _bad(f"partition[{i}]", f"{p!r} is not an attribute of the space")
    if len(set(partition)) != len(partition):
        raise _bad("partition", "an attribute is named twice")
    space = Space.of(attrs, tuple(partition))
    if "dimensions" in data and data["dimensions"] != space.to_json()["dimensions"]:
        raise _bad("dimensions", "not those of the partition attributes (leave it out: it is derived)")
    return space


def _attribute(a: Any, where: str) -> Attribute:
    if not isinstance(a, dict):
        raise _bad(where, "expected a mapping with name and type")
    for key in a:
        if key not in ("name", "type", "optional", "min", "max"):
            raise _bad(f"{where}.{key}", "unknown key; an attribute has name, type, optional, min, max")
    name, kind, optional = a.get("name"), a.get("type", NUMBER), a.get("optional", False)
    if not isinstance(name, str) or not name.isidentifier():
        raise _bad(f"{where}.name", f"expected an identifier, got {name!r}")
    if kind not in TYPES:
        raise _bad(f"{where}.type", f"expected one of {list(TYPES)}, got {kind!r}")
    if not isinstance(optional, bool):
        raise _bad(f"{where}.optional", f"expected true or false, got {optional!r}")
    if kind != NUMBER:
        for key in ("min", "max"):
            if key in a:
                raise _bad(f"{where}.{key}", f"only a number has {key}")
        return Attribute(name, kind, optional)
    lo, hi = a.get("min"), a.get("max")
    for key, v in (("min", lo), ("max", hi)):
        if not finite_number(v):
            raise _bad(f"{where}.{key}", f"expected a finite number, got {v!r}")
    assert isinstance(lo, (int, float)) and isinstance(hi, (int, float))
    if not lo < hi:
        raise _bad(where, f"min ({lo}) must be below max ({hi})")
    return Attribute(name, NUMBER, optional, float(lo), float(hi))
