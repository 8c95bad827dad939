"""The `space` label of a process's metrics, bounded (docs/metrics.md, "The space label").

A cluster may serve thousands of spaces; a label value per space on every labelled metric
would make as many series per process. `default` always has its own value; so do the first
`most` named spaces a process counts (`BLUEDOVE_METRICS_SPACES`, 50 by default), for as long as
it runs, so that a series never changes hands; every other space's figures are summed under
`_other`. A space's label is therefore its name on every process that met it among its first
`most`, and the sum over `space` is every space's total on each.
"""

from __future__ import annotations

from bluedove.core.spaces import DEFAULT_SPACE

OTHER = "_other"  # not a space name: a name is [a-z0-9-]


class SpaceLabels:
    """`labels(space)`: the label value `space`'s figures are counted under in this process."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._named: set[str] = set()

    def __call__(self, space: str) -> str:
        if space == DEFAULT_SPACE or space in self._named:
            return space
        if len(self._named) < self.most:
            self._named.add(space)
            return space
        return OTHER

    def __len__(self) -> int:
        """Named spaces with a label value of their own."""
        return len(self._named)
