"""Measure Redis memory per subscription and per queued delivery (INFO memory before/after N).

    python scripts/store_memory.py [--subs 20000] [--deliveries 200000] [--queues 1000]

Starts a private redis-server (as `bluedove up` does), writes through the real Store, prints
one JSON object. Figures in docs/benchmarks.md ("Store memory").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bluedove.store.server import RedisServer
from bluedove.store.store import Store, new_id


async def used(store: Store) -> int:
    await asyncio.sleep(0.2)
    return int((await store.r.info("memory"))["used_memory"])


async def measure(args) -> dict:
    rnd = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(tmp).start()
        store = Store(server.url)
        try:
            queues = [(await store.create_queue())[0] for _ in range(args.queues)]
            base = await used(store)
            for i in range(args.subs):
                lo = [rnd.uniform(0, 900) for _ in range(4)]
                preds = {f"x{d}": [round(lo[d], 3), round(lo[d] + rnd.uniform(1, 100), 3)]
                         for d in range(rnd.randint(1, 4))}
                await store.add_subscription({"id": new_id(), "queue": queues[i % len(queues)], "predicates": preds})
            after_subs = await used(store)
            now = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
            batch = 256
            sub_ids = json.dumps([new_id()])
            for start in range(0, args.deliveries, batch):
                msgs, dels = [], []
                for j in range(min(batch, args.deliveries - start)):
                    mid = new_id()
                    body = {"id": mid, "attributes": {f"x{d}": round(rnd.uniform(0, 1000), 3) for d in range(4)},
                            "payload": {"sensor": rnd.randint(1, 9999), "speed": rnd.randint(0, 120)},
                            "published_at": now}
                    msgs.append((mid, json.dumps(body, separators=(",", ":")), 120))
                    dels.append((queues[rnd.randrange(len(queues))], j, sub_ids))
                await store.deliver(msgs, dels)
            after_deliveries = await used(store)
            # Hand every delivery out once (pending, not acked).
            for q in queues:
                while await store.poll(q, 1000, 0):
                    pass
            after_pending = await used(store)
            delivery_mark, message_mark = (await sample_dedup(store, "bd:{q:*}:dd:*"),
                                           await sample_dedup(store, "bd:dd:*"))
            # What the marks really hold (key, value, expiry, the keyspace's entries): the memory
            # freed by deleting them, last, once everything else is measured.
            freed_delivery_marks = await delete_all(store, "bd:{q:*}:dd:*")
            freed_message_marks = await delete_all(store, "bd:dd:*")
            return {
                "subscriptions": args.subs, "deliveries": args.deliveries, "queues": args.queues,
                "message_body_bytes": len(msgs[-1][1]),
                "bytes_per_subscription": round((after_subs - base) / args.subs),
                "bytes_per_queued_delivery": round((after_deliveries - after_subs) / args.deliveries),
                # each delivery's (queue, message) mark, and the publisher-id mark of each message
                "dedup_mark_bytes_per_delivery": delivery_mark,
                "dedup_mark_bytes_per_message": message_mark,
                "bytes_per_pending_delivery_extra": round((after_pending - after_deliveries) / args.deliveries),
                "bytes_freed_per_delivery_mark": freed_delivery_marks,
                "bytes_freed_per_message_mark": freed_message_marks,
            }
        finally:
            await store.close()
            server.stop()


async def sample_dedup(store: Store, pattern: str) -> int:
    """MEMORY USAGE of up to 200 keys matching `pattern`, averaged."""
    keys = [k async for k in store.r.scan_iter(pattern, count=1000)][:200]
    sizes = [await store.r.memory_usage(k) or 0 for k in keys]
    return round(sum(sizes) / max(len(sizes), 1))


async def delete_all(store: Store, pattern: str) -> int:
    """Delete every key matching `pattern`; the memory freed per key."""
    before, n = await used(store), 0
    batch: list[str] = []
    async for k in store.r.scan_iter(pattern, count=1000):
        batch.append(k)
        if len(batch) == 1000:
            n += await store.r.delete(*batch)
            batch = []
    if batch:
        n += await store.r.delete(*batch)
    return round((before - await used(store)) / max(n, 1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--subs", type=int, default=20_000)
    p.add_argument("--deliveries", type=int, default=200_000)
    p.add_argument("--queues", type=int, default=1000)
    print(json.dumps(asyncio.run(measure(p.parse_args()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
