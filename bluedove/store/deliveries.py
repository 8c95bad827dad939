"""Deliveries: a matcher's batch of matches written into the queues, exactly once per queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from bluedove.store import keys as K
from bluedove.store import scripts
from bluedove.store.batch import Arg, Call, group_deliveries
from bluedove.store.connection import StoreLimits
from bluedove.store.queues import GROUP
from bluedove.store.replays import Replays, SeamRow


class Deliveries(Replays):
    """The write of a matched batch: deliveries with their dedup marks, one script per slot."""

    def __init__(self, url: str, limits: StoreLimits | None = None) -> None:
        super().__init__(url, limits)
        self._deliver = self.r.register_script(scripts.DELIVER)
        # Deliveries refused by a full queue in the writes of this process (the metrics).
        self.dropped = 0

    async def deliver(self, messages: Sequence[tuple[str, str | bytes] | tuple[str, str | bytes, int]],
                      deliveries: list[tuple[str, int, str]],
                      marks: list[bool] | None = None, seam: Sequence[SeamRow] = (),
                      log: Call | None = None) -> tuple[int, int]:
        """Write one batch: messages [(id, json[, dedup ttl s])], deliveries [(queue, index, subs
        json)]. Returns (messages new to the dedup window, deliveries written).

        Each delivery carries a dedup mark for (queue, message) that lasts the message's ttl
        (by default the dedup window), so writing the same batch again, whole or after a
        failure part way, writes none twice. The messages of `marks` (default: all) are
        publisher-chosen ids: once a batch is written, each gets a mark of its own, and
        publishing it again within the window writes nothing, even to a queue that has
        subscribed since. The batch is one call per DELIVER_MOST deliveries of a slot
        (bluedove/store/batch.py; docs/design.md, "The store on a Redis Cluster"), pipelined.
        `seam`: deliveries to subscriptions whose replay is starting, written with their replay
        marks (bluedove/store/replays.py); `log`: the batch's chunk of its space's log, appended
        in the same pipeline."""
        ttls = [int(m[2]) if len(m) > 2 else self.limits.dedup_window_s for m in messages]
        mids = [m[0] for m in messages]
        marked = [i for i in range(len(messages)) if marks is None or marks[i]]
        seen: set[int] = set()
        if marked:
            async with self.r.pipeline(transaction=False) as p:
                for i in marked:
                    p.exists(K.message_mark(mids[i]))
                seen = {i for i, n in zip(marked, await p.execute()) if n}
        groups = group_deliveries(deliveries, mids, seen, self.runner.slot_of_queue)
        calls: list[Call] = []
        seams = self.seam_calls([(mids[i], m[1], ttls[i]) for i, m in enumerate(messages)],
                                [r for r in seam if r[1] not in seen]) if seam else []
        locals_: list[list[int]] = [g.messages for g in groups] + [used for _, used in seams]
        for g in groups:
            args: list[Arg] = [len(g.messages), self.limits.max_undelivered, self.limits.retention_s, GROUP]
            for i in g.messages:
                args += (messages[i][1], ttls[i])
            calls.append(Call(self._deliver, g.keys, args + g.pairs))
        calls += [c for c, _ in seams]
        written = 0
        new = {i for i in marked if i not in seen}
        if calls or log is not None:
            results = await self.runner.run(calls + ([log] if log is not None else []), wait=True)
            for used, (n, dropped, *local) in zip(locals_, results):
                written += int(n)
                self.dropped += int(dropped)
                new.update(used[int(li) - 1] for li in local)
        fresh = [i for i in marked if i not in seen]
        if fresh:
            async with self.r.pipeline(transaction=False) as p:
                for i in fresh:
                    p.set(K.message_mark(mids[i]), "1", ex=ttls[i])
                await p.execute()
        return len({mids[i] for i in new}), written
