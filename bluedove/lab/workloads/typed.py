"""Workloads of typed spaces (docs/design.md, "Typed attributes"), deterministic for a seed.

The numeric `Workload` (bluedove/lab/workloads/__init__.py) holds its subscriptions as arrays of
bounds. A typed space's filters are more than boxes (`in`, `prefix`, `not_in`, `exists`,
`any_of`), so a `TypedWorkload` holds each subscription as the API's predicates object, each
message as its attributes, and its oracle is the core's own exact check (`Filter.matches`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bluedove.core.filters import Filter, parse_filter
from bluedove.core.space import Space


@dataclass(frozen=True)
class TypedWorkload:
    """A workload of a typed space: its subscriptions as API predicate objects, the queue each
    delivers into, and a sampler of messages' attributes."""

    name: str
    space: Space
    predicates: list[dict[str, Any]]  # (n_subs,) the API's filter objects
    queue_of: np.ndarray  # (n_subs,) index of the subscriber/queue owning each subscription
    n_queues: int
    # sample(n, rng) -> n messages' attributes, each a mapping the API takes as "attributes"
    sample: Callable[[int, np.random.Generator], list[dict[str, Any]]]

    @property
    def n_subs(self) -> int:
        return len(self.predicates)

    def messages(self, n: int, seed: int = 0) -> list[dict[str, Any]]:
        return self.sample(n, np.random.default_rng(seed))

    def filters(self) -> list[Filter]:
        """Every subscription as the core parses it (bluedove/core/filters.py `parse_filter`)."""
        return [parse_filter(p, self.space) for p in self.predicates]


def matching(filters: Sequence[Filter], messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The oracle: for each message's attributes, the indices of the filters it matches."""
    return [[j for j, f in enumerate(filters) if f.matches(m)] for m in messages]


@dataclass(frozen=True)
class Served:
    """A typed workload as the cluster benches take a workload (bluedove/lab/bench/stage.py,
    bluedove/lab/readers.py): `predicates(j)` subscription j's filter object, `sample(n, rng)`
    messages' attributes."""

    typed: TypedWorkload

    @property
    def name(self) -> str:
        return self.typed.name

    @property
    def space(self) -> Space:
        return self.typed.space

    @property
    def queue_of(self) -> np.ndarray:
        return self.typed.queue_of

    @property
    def n_queues(self) -> int:
        return self.typed.n_queues

    @property
    def n_subs(self) -> int:
        return self.typed.n_subs

    def predicates(self, j: int) -> dict[str, Any]:
        return self.typed.predicates[j]

    def sample(self, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        return self.typed.sample(n, rng)
