"""The adaptive policy's charges: the work this dispatcher sent each matcher since its last load report.

Between two reports a matcher's backlog is extrapolated from the older one, which cannot show
what this dispatcher itself sent meanwhile; so `adaptive` adds the cost of every message sent
there since (docs/design.md, "Forwarding policies (§III-B)", the `sent` term). Everything that
changes the account goes through `Charges`: a message ranked one at a time (`charge`), a
batch ranked in the compiled loop, which charges its choices in an array (`array`, then
`take_back`), a message failed over to its next candidate (`charge`), and a report, which
shows everything sent before it (`reset`). The other policies keep no account. Pure: no I/O,
no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt


class Charges:
    """Matcher seconds of work sent each matcher (by member id) since its last report; kept only under `adaptive`."""

    def __init__(self, adaptive: bool) -> None:
        self.adaptive = adaptive
        self._sent: dict[str, float] = {}

    def by_member(self) -> Mapping[str, float]:
        """The account, read-only: `bluedove.core.forwarding.rank`'s `sent`."""
        return self._sent

    def charge(self, member: str, cost: float) -> None:
        """A message sent to `member`, costing it `cost` seconds of matching."""
        if self.adaptive:
            self._sent[member] = self._sent.get(member, 0.0) + cost

    def array(self, members: Sequence[str]) -> npt.NDArray[np.float64]:
        """The account of `members`, in their order, for the batch ranking to charge in place
        (`bluedove.core.forwarding.rank_batch`'s `sent`); hand it back with `take_back`."""
        return np.array([self._sent.get(m, 0.0) for m in members], dtype=np.float64)

    def take_back(self, members: Sequence[str], sent: npt.NDArray[np.float64]) -> None:
        """The account of `members` as the batch ranking left it in `array`'s array."""
        if self.adaptive:
            for m, v in zip(members, sent.tolist()):
                if v:
                    self._sent[m] = v

    def reset(self, member: str) -> None:
        """`member` reported (or could not be reached): what was sent before is in its queues or done."""
        self._sent.pop(member, None)
