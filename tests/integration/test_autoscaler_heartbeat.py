"""The autoscaler says it runs (the store's autoscaler entry, shown by /v1/cluster) even while a
step takes long: a scale-in drains a matcher first, up to its drain timeout, which is longer
than the entry's time to live. Before, the entry was written by the step itself and lapsed
during a drain, so the cluster showed the autoscaler as off."""

from __future__ import annotations

import asyncio

from bluedove.autoscaler.policy import ScalingConfig
from bluedove.autoscaler.runner import Autoscaler


class NoBackend:
    name = "test"

    def current(self) -> int:
        return 1

    def scale_to(self, n: int) -> str:
        return "nothing"


class SlowStep(Autoscaler):
    """Every step takes `step_s` (a long drain)."""

    def __init__(self, store, step_s: float) -> None:
        super().__init__(NoBackend(), store, ScalingConfig(min_matchers=1, max_matchers=3), interval_s=0.2)
        self.step_s = step_s
        self.steps = 0

    async def step(self, now: float):
        self.steps += 1
        await asyncio.sleep(self.step_s)


async def test_the_heartbeat_goes_on_while_a_step_is_slow(store):
    scaler = SlowStep(store, step_s=7.0)  # longer than the entry's 5 s time to live
    stop = asyncio.Event()
    task = asyncio.create_task(scaler.run(stop))
    seen = []
    for _ in range(14):  # 7 s, within the one slow step
        await asyncio.sleep(0.5)
        seen.append(await store.get_autoscaler())
    assert scaler.steps == 1, "the test must sample within one step"
    assert all(s == {"enabled": True, "min": 1, "max": 3, "backend": "test"} for s in seen), seen
    stop.set()
    await asyncio.wait_for(task, 10)
