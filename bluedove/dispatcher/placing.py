"""Where a space's subscriptions go: the partition mode's placement (mPartition by default)
under the space's table, and also under the previous one during a hand-off (docs/design.md,
"Elasticity"), for one subscription or for many at once. The cluster view and a named space's
view are both `Placing`."""

from __future__ import annotations

import time

import numpy as np

from bluedove.core.partition import modes
from bluedove.core.partition.segments import SegmentTable
from bluedove.runtime.settings import DispatcherSettings


class Placing:
    """Placement under the current table and, until its grace ends, the previous one."""

    s: DispatcherSettings
    previous: tuple[SegmentTable, float] | None

    def current(self) -> SegmentTable:
        raise NotImplementedError

    def kept(self, member: str) -> bool:
        """Whether a member of the previous table still gets its subscriptions."""
        return True

    def _tables(self) -> list[tuple[SegmentTable, bool]]:
        """The current table, and the previous one during a hand-off (True: the previous)."""
        out = [(self.current(), False)]
        if self.previous is not None:
            prev, until = self.previous
            if time.monotonic() < until:
                out.append((prev, True))
            else:
                self.previous = None
        return out

    def placement(self, lows: tuple[float, ...], highs: tuple[float, ...]) -> set[str]:
        """The matchers storing a subscription of these bounds."""
        out: set[str] = set()
        for table, old in self._tables():
            out |= {m for m in modes.placement(self.s.partition, table, lows, highs) if not old or self.kept(m)}
        return out

    def placement_many(self, lows: np.ndarray, highs: np.ndarray) -> dict[str, np.ndarray]:
        """`placement` of many non-empty boxes (rows of `lows`/`highs`): member -> a mask of
        the rows it stores; members storing none left out."""
        out: dict[str, np.ndarray] = {}
        for table, old in self._tables():
            for m, mask in modes.placement_many(self.s.partition, table, lows, highs).items():
                if not old or self.kept(m):
                    out[m] = out[m] | mask if m in out else mask
        return out
