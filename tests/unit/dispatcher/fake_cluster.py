"""The cluster view a Subscriber's lane tests send through: four owners, each of a quarter of
x0 (the other dimensions left out of the placement), their stubs given by the test, the
members marked down, and those gossip holds dead."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

MEMBERS = ("m1", "m2", "m3", "m4")


class FakeCluster:
    def __init__(self, matchers: dict[str, Any]) -> None:
        self.matchers = matchers
        self.table = SimpleNamespace(members=dict.fromkeys(MEMBERS), epoch=1)
        self.down: list[str] = []
        self.dead: set[str] = set()  # held dead or left by gossip

    def stub(self, member: str) -> Any:
        return self.matchers[member]

    def placement(self, lows, highs) -> set[str]:
        return {m for i, m in enumerate(MEMBERS) if lows[0] < 250 * (i + 1) and 250 * i < highs[0]}

    def placement_many(self, lows, highs) -> dict[str, np.ndarray]:
        masks = {m: np.array([m in self.placement(lo, hi) for lo, hi in zip(lows, highs)], dtype=bool)
                 for m in MEMBERS}
        return {m: mask for m, mask in masks.items() if mask.any()}

    def mark_up(self, member: str) -> None:
        pass

    def mark_down(self, member: str) -> None:
        self.down.append(member)

    def gone(self, member: str) -> bool:
        return member in self.dead
