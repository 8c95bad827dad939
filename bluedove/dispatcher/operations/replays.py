"""A subscribe's replay (docs/api.md, "Replay"): `replay_from` checked, and the replay started
once every matcher has the subscription (bluedove/dispatcher/replay.py says why that order
makes the seam exact)."""

from __future__ import annotations

import time
from typing import Any

from bluedove.core.errors import ApiError, unavailable
from bluedove.core.model import Subscription
from bluedove.core.times import iso_ms, parse_time_ms
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.replay import position_ms
from bluedove.dispatcher.space_paths import SpacePath
from bluedove.store.keys import join_pos
from bluedove.store.replays import SEAM_S


def replay_from(body: Any, p: SpacePath) -> tuple[Any, int | None]:
    """The body without `replay_from`, and its time in ms (None: no replay asked). 422 naming
    `replay_from` when it is not a time, is in the future, or the space keeps no log."""
    if not isinstance(body, dict) or "replay_from" not in body:
        return body, None
    ms = parse_time_ms(body["replay_from"], "replay_from", int(time.time() * 1000), "invalid_subscription")
    if not p.retention_s:
        how = "create it with retention_s" if p.named else "its space file sets retention_s when the cluster is made"
        raise ApiError(422, "invalid_subscription", f"space {p.name!r} keeps no log to replay ({how})", "replay_from")
    return {k: v for k, v in body.items() if k != "replay_from"}, ms


async def start_replay(d: Dispatcher, p: SpacePath, sub: Subscription, from_ms: int, missed: set[str],
                       sent_at: float, created: bool) -> dict[str, str]:
    """Record the replay and start it here; its `{"from": the effective start}` (the later of
    `from_ms`, the space's making and the start of its retention). The log's end
    is read now, after every matcher filed the subscription; if one did not (or this came too
    late for the matchers' seam), the subscription is taken back and the call answers 503."""
    end = None if missed else await d.store.log_ends(p.name)
    if end is None or time.monotonic() - sent_at > SEAM_S / 2:
        await _take_back(d, p, sub, created)
        raise unavailable("a matcher did not take the subscription in time (or the store answered too slowly), "
                          "so its replay could not be made exact; nothing was kept: retry")
    # what the log holds for certain: since the space was made, within its retention
    shown = max(from_ms, p.log_since, int(time.time() * 1000) - p.retention_s * 1000)
    await d.store.start_replay(p.name, sub.id, sub.queue, from_ms, join_pos(end), shown)
    d.replayer.run(p.name, p.space, p.at, sub.id)
    return {"from": iso_ms(shown)}


async def _take_back(d: Dispatcher, p: SpacePath, sub: Subscription, created: bool) -> None:
    await d.store.remove_subscriptions([(sub.id, sub.queue)], p.at)
    await p.subscriber.send_removal(sub.id)
    if created:
        await d.store.delete_queue(sub.queue)


async def replay_view(d: Dispatcher, p: SpacePath, sub_id: str) -> dict[str, Any] | None:
    """A subscription's replay as GET shows it: {from, position, done} (None: it has none)."""
    if not p.retention_s:
        return None
    state = await d.store.replay_state(p.name, sub_id)
    if state is None:
        return None
    reached = position_ms(state)
    return {"from": iso_ms(int(state.get("start", state["from"]))),
            "position": None if reached is None else iso_ms(reached),
            "done": state.get("done") == "1", "delivered": int(state.get("delivered", 0))}
