"""What the publish and subscribe paths ask of a space's routing: its table, the candidates of
a message, the placement of a subscription, and the matchers' stubs and health. The default
space's is the cluster view (bluedove/dispatcher/view.py); a named space's is its
`SpaceView` (bluedove/dispatcher/space_view.py)."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from bluedove.core.forwarding import Ranking
from bluedove.core.partition.segments import SegmentTable
from bluedove.v1 import matcher_pb2_grpc as pb_grpc


class Routing(Protocol):
    """A space's table and how messages and subscriptions are routed by it."""

    @property
    def table(self) -> SegmentTable | None: ...

    def stub(self, member: str) -> pb_grpc.MatcherStub: ...

    def mark_up(self, member: str) -> None: ...

    def mark_down(self, member: str) -> None: ...

    def gone(self, member: str) -> bool: ...

    async def pull_table(self, member: str) -> None: ...

    def rank_batch(self, points: npt.NDArray[np.float64], now: float) -> Ranking: ...

    def charge(self, candidate: tuple[int, str]) -> None: ...

    def placement(self, lows: tuple[float, ...], highs: tuple[float, ...]) -> set[str]: ...

    def placement_many(self, lows: npt.NDArray[np.float64],
                       highs: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.bool_]]: ...
