"""Client-side helpers for integration tests: queues, subscriptions, draining, the oracle."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np

from bluedove.core.model import Subscription, build_subscription, only_ranges
from bluedove.core.space import Space
from bluedove.store import keys as K
from tests.unit.core.test_filters import oracle as filter_oracle


def catalogue_size(r) -> tuple[int, int]:
    """(stored subscriptions, catalogue log entries) over every shard, by a sync client."""
    return (sum(r.hlen(K.catalog_hash(s)) for s in range(K.CATALOG_SHARDS)),
            sum(r.xlen(K.catalog_log(s)) for s in range(K.CATALOG_SHARDS)))


def new_queue(api: httpx.Client) -> tuple[str, dict]:
    r = api.post("/v1/queues")
    assert r.status_code == 201, r.text
    body = r.json()
    return body["queue"], {"Authorization": f"Bearer {body['token']}"}


async def drain(client: httpx.AsyncClient, queues: dict[str, dict], quiet_rounds: int = 2,
                max_rounds: int = 200) -> list[tuple[str, dict]]:
    """Poll and ack every queue until `quiet_rounds` rounds in a row bring nothing."""
    got: list[tuple[str, dict]] = []
    quiet = 0
    sem = asyncio.Semaphore(16)

    async def one(q: str, headers: dict) -> int:
        async with sem:
            n = 0
            while True:
                r = await client.get(f"/v1/queues/{q}/messages", params={"max": 1000, "wait": 0}, headers=headers)
                assert r.status_code == 200, r.text
                msgs = r.json()["messages"]
                if not msgs:
                    return n
                got.extend((q, m) for m in msgs)
                n += len(msgs)
                a = await client.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in msgs]},
                                      headers=headers)
                assert a.status_code == 204, a.text

    for _ in range(max_rounds):
        counts = await asyncio.gather(*(one(q, h) for q, h in queues.items()))
        quiet = quiet + 1 if sum(counts) == 0 else 0
        if quiet >= quiet_rounds:
            break
        await asyncio.sleep(0.3)
    return got


def oracle(space: Space, subs: dict[str, tuple[str, dict]], messages: dict) -> dict:
    """Brute force: {(queue, message id): {subscription ids}} for every live subscription.
    `messages` are {id: values in the space's order}, or in a typed space {id: attributes}. In
    a space of numbers a filter of ranges is its box compared with every message at once (low
    <= v < high on each dimension); any other filter, and every one of a typed space, is
    judged by the language's meaning, written directly (tests/unit/core/test_filters.py), not
    by the service's own code."""
    mids, points, named = _table(space, messages)
    expected: dict[tuple[str, str], set[str]] = {}
    for sid, (q, preds) in subs.items():
        for i in _matching(space, build_subscription(sid, q, preds, space), preds, points, named):
            expected.setdefault((q, mids[i]), set()).add(sid)
    return expected


def _table(space: Space, messages: dict) -> tuple[list[str], np.ndarray | None, list[dict]]:
    """The messages' ids, their values as rows (None in a typed space) and their attributes."""
    mids = list(messages)
    if space.typed:
        return mids, None, [messages[m] for m in mids]
    points = np.array([messages[m] for m in mids], dtype=np.float64).reshape(len(mids), space.k)
    return mids, points, [dict(zip(space.names, messages[m])) for m in mids]


def _matching(space: Space, sub: Subscription, preds: dict, points: np.ndarray | None,
              named: list[dict]) -> list[int]:
    """The indexes of the messages (rows of `points`) that `sub` matches."""
    if points is None or not only_ranges(preds):
        return [i for i, attrs in enumerate(named) if filter_oracle(space, preds, attrs)]
    hit = np.zeros(len(points), dtype=bool)
    for lows, highs in sub.boxes:
        hit |= ((points >= np.array(lows)) & (points < np.array(highs))).all(axis=1)
    return np.flatnonzero(hit).tolist()


def compare(expected: dict, got: list[tuple[str, dict]]) -> dict:
    """Differences between the oracle and what arrived: missing, unexpected, duplicates, wrong lists."""
    seen, dups = _received(got)
    return {
        "missing": sorted(set(expected) - set(seen))[:10],
        "unexpected": sorted(set(seen) - set(expected))[:10],
        "duplicates": dups[:10],
        "wrong_subscriptions": [k for k in expected if k in seen and seen[k] != expected[k]][:10],
    }


def timed_compare(space: Space, subs: dict, sub_times: dict, messages: dict, msg_times: dict,
                  got: list[tuple[str, dict]]) -> dict:
    """`compare` for subscriptions made while publishing: a subscription answered (201) before
    a publish was sent must match it; one sent after the publish was answered (202) must not;
    one in flight meanwhile may go either way. Times are (sent, answered) pairs; a
    subscription without times existed before any publish."""
    mids, points, named = _table(space, messages)
    must: dict[tuple[str, str], set[str]] = {}
    may: dict[tuple[str, str], set[str]] = {}
    for sid, (q, preds) in subs.items():
        s_sent, s_done = sub_times.get(sid, (float("-inf"), float("-inf")))
        for i in _matching(space, build_subscription(sid, q, preds, space), preds, points, named):
            m_sent, m_done = msg_times[mids[i]]
            if s_done < m_sent:
                must.setdefault((q, mids[i]), set()).add(sid)
            elif s_sent <= m_done:
                may.setdefault((q, mids[i]), set()).add(sid)
    seen, dups = _received(got)
    return {
        "missing": sorted(k for k in must if k not in seen)[:10],
        "unexpected": sorted(k for k in seen if k not in must and k not in may)[:10],
        "duplicates": dups[:10],
        "wrong_subscriptions": [k for k, v in seen.items()
                                if not must.get(k, set()) <= v <= must.get(k, set()) | may.get(k, set())][:10],
    }


def _received(got: list[tuple[str, dict]]) -> tuple[dict[tuple[str, str], set[str]], list[tuple[str, str]]]:
    """{(queue, message id): subscriptions listed} of what arrived, and the keys that came twice."""
    seen: dict[tuple[str, str], set[str]] = {}
    dups = []
    for q, m in got:
        key = (q, m["id"])
        if key in seen:
            dups.append(key)
        seen[key] = set(m["subscriptions"])
    return seen, dups


def stop_up(proc, data_dir) -> None:
    """SIGTERM a `bluedove up` process (SIGKILL after 30 s); then nothing started under
    `data_dir` may be left running."""
    import signal
    import subprocess

    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    everything = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    assert str(data_dir) not in everything, "a process outlived `bluedove up`"


def extra_dispatcher(cluster, name: str, extra_args: list[str]) -> tuple[str, str]:
    """One more dispatcher on the cluster's matchers and store, on its own HTTP and gRPC ports
    (the cluster's dispatchers share one port, so a test could not tell which answered),
    stopped with the cluster; (REST URL, gRPC address) once it is ready."""
    import time

    from bluedove.local.cluster import Child, bluedove_command
    from bluedove.store.server import free_port

    port, gport = free_port(), free_port()
    child = Child("dispatcher", name, bluedove_command() + [
        "dispatcher", "--id", name, "--host", cluster.host, "--http-port", str(port), "--grpc-port", str(gport),
        "--gossip-port", "0", "--store", cluster.store_url, *extra_args, *cluster._space_args(),
    ], cluster.data_dir / "logs" / f"{name}.log")
    cluster.children.append(child)
    child.start()
    url = f"http://{cluster.host}:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return url, f"{cluster.host}:{gport}"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"dispatcher {name} not ready within 30 s")


def output_until_ready(proc) -> str:
    """What a `bluedove up` process printed up to its `ready` line (or its end)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("ready"):
            break
    return "".join(lines)
