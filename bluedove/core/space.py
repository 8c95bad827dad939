"""The attribute space: an ordered list of dimensions, each a half-open range [min, max)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml


class SpaceError(ValueError):
    """A space definition that cannot be used; the message names the offending key."""


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
    """The attribute space: its dimensions, in order."""

    dimensions: tuple[Dimension, ...]

    @property
    def k(self) -> int:
        return len(self.dimensions)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def index(self, name: str) -> int:
        """The position of dimension `name`; ValueError if the space has none of that name.
        (Once per predicate of every subscription: a dict, built once.)"""
        try:
            return self._positions[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a dimension of the space") from None

    def to_json(self) -> dict[str, Any]:
        return {"dimensions": [d.to_json() for d in self.dimensions]}

    @classmethod
    def from_json(cls, data: object) -> "Space":
        if not isinstance(data, dict) or not isinstance(data.get("dimensions"), list):
            raise SpaceError("space: expected a mapping with a list 'dimensions'")
        for key in data:
            if key != "dimensions":  # a misspelt setting must not be ignored silently
                raise SpaceError(f"{key}: unknown key; a space has only 'dimensions'")
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
    """Read a YAML space file (`dimensions: [{name, min, max}, ...]`); None gives the default."""
    if path is None:
        return default_space()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpaceError(f"{path}: {exc}") from exc
    return Space.from_json(data)


def _num(v: float) -> int | float:
    """Render whole floats as ints so the JSON reads like the config it came from."""
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else v
