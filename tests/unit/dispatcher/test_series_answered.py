"""The stored -> answered hop a dispatcher records of each answer: the wait of its oldest new
delivery (an entry handed out again after its visibility timeout is not a wait for a new message)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from bluedove.core import timeseries as ts
from bluedove.dispatcher.series import DispatcherSeries


class Rec:
    def __init__(self) -> None:
        self.added: list[tuple[str, int]] = []

    def add(self, name: str, n: int = 1, now: float | None = None) -> None:
        self.added.append((name, n))


def test_the_oldest_new_delivery_of_an_answer_is_its_wait():
    now_ms = int(time.time() * 1000)
    series = SimpleNamespace(rec=Rec())
    handed = f"{now_ms - 60_000}-0,{now_ms - 2_500}-3,{now_ms - 10}-0"
    DispatcherSeries.on_answered(series, handed, 1)  # the first was handed out again: the second counts
    DispatcherSeries.on_answered(series, f"{now_ms - 40}-0", 0)
    DispatcherSeries.on_answered(series, f"{now_ms + 50}-0", 0)  # the store's clock ahead: no wait
    assert series.rec.added == [(ts.answered_field(2.5), 1), (ts.answered_field(0.04), 1),
                                (ts.answered_field(0.0), 1)]
