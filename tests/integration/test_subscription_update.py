"""PUT /v1/subscriptions/{id} on a real 4-matcher cluster (docs/api.md, "Subscriptions").

Under a steady publisher, subscriptions are replaced again and again. The table is the
diagonal one (matcher k owns the k-th quarter of every dimension), and each version is a box
in the region of one or two neighbouring owners on every dimension, another set of owners
than the last: a matcher holds the old version alone (it must drop it), another the new one
alone (it must file it), and consecutive versions agree in part. Some versions are filters of
two boxes on different owners, or carry a check after the index. Most messages sit in one
owner's region, where that owner is their only candidate. Each
message is judged against the versions that may have been in effect while it was published:
one answered (202) after a PUT returned is matched by that version alone; one answered before
a PUT was sent, by the version before it; one published meanwhile, by either. Whatever every
possible version matches arrives exactly once, nothing arrives that none matches. Then the
error answers (each changes nothing), and the SDK and the CLI over REST and gRPC.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time

import grpc
import httpx
import pytest

from bluedove.client import AsyncClient, Client, InvalidSubscription, NotFound, Subscription, Unauthorized
from bluedove.store.client import sync_client
from bluedove.v1 import pubsub_pb2 as pb
from bluedove.v1 import pubsub_pb2_grpc as pb_grpc
from tests.integration.conftest import assert_no_children, start_cluster
from tests.integration.helpers import catalogue_size, drain, new_queue, oracle

pytestmark = pytest.mark.integration

N_SUBS = 6
ROUNDS = 16  # replaces of each subscription
RATE = 100  # messages per second
NEVER = float("-inf")


@pytest.fixture(scope="module")
def updated(tmp_path_factory):
    """A 4-matcher cluster of this module's own: its publishes reach no other test's queues."""
    c = start_cluster(tmp_path_factory.mktemp("update"), matchers=4)
    yield c
    c.stop()
    assert_no_children(c)


def region(rng: random.Random, table, owners: list[str]) -> dict:
    """A box over the region of neighbouring `owners` on every dimension, its edges a little
    inside or past the region's (so that a neighbour may hold it too)."""
    segs = [table.segments_of(m) for m in owners]
    box = {}
    for i, d in enumerate(table.space.dimensions):
        lo, hi = min(s[i][0] for s in segs), max(s[i][1] for s in segs)
        box[d.name] = [round(max(lo + rng.uniform(-30, 40), d.min), 2), round(min(hi + rng.uniform(-40, 30), d.max), 2)]
    return box


def version(rng: random.Random, table, before: tuple[str, ...] | None) -> tuple[dict, tuple[str, ...]]:
    """New predicates and the owners they were drawn for (another set than `before`): one
    owner's region or two neighbours'; now and then two boxes on owners apart, or a check
    after the index."""
    ms = sorted(table.members, key=lambda m: table.segments_of(m)[0])
    choices = [(m,) for m in ms] + list(zip(ms, ms[1:]))
    owners = rng.choice([c for c in choices if c != before])
    kind = rng.random()
    if kind < 0.2:
        far = rng.choice([m for m in ms if m not in owners])
        return {"any_of": [region(rng, table, list(owners)), region(rng, table, [far])]}, owners
    preds = region(rng, table, list(owners))
    if kind < 0.35:
        preds["x1"] = {"gte": preds["x1"][0], "lt": preds["x1"][1], "not_in": [500]}
    return preds, owners


class Publisher:
    """Publishes messages, each retried with its id until accepted (at most 15 s), keeping each
    one's values and its (first sent, accepted) times."""

    def __init__(self, client: httpx.AsyncClient, table) -> None:
        self.client, self.table = client, table
        self.messages: dict[str, tuple[float, ...]] = {}
        self.times: dict[str, tuple[float, float]] = {}
        self.refused: list[str] = []

    async def one(self, mid: str, attrs: dict) -> None:
        first = time.monotonic()
        while True:
            r = await self.client.post("/v1/messages", json={"attributes": attrs, "id": mid})
            if r.status_code == 202:
                self.messages[mid] = tuple(attrs[d] for d in self.table.space.names)
                self.times[mid] = (first, time.monotonic())
                return
            assert r.status_code == 503 and time.monotonic() < first + 15, r.text
            self.refused.append(mid)
            await asyncio.sleep(0.1)

    async def steadily(self, rng: random.Random, done: asyncio.Event, tail_s: float = 1.0) -> None:
        """RATE messages a second until `tail_s` after `done`: four in five inside one owner's
        region (its only candidate), the rest anywhere."""
        names = self.table.space.names
        tasks, n, end = [], 0, None
        while end is None or time.monotonic() < end:
            seg = self.table.segments_of(rng.choice(list(self.table.members))) if rng.random() < 0.8 else None
            attrs = {d: rng.uniform(*(seg[i] if seg else (0, 1000))) for i, d in enumerate(names)}
            tasks.append(asyncio.create_task(self.one(f"m{n}", attrs)))
            n += 1
            await asyncio.sleep(1 / RATE)
            if end is None and done.is_set():
                end = time.monotonic() + tail_s
        await asyncio.gather(*tasks)

    async def probe(self, rng: random.Random, mid: str, inside: dict, outside: dict) -> None:
        """A message that `inside` matches and `outside` does not, if a few draws in `inside`'s
        boxes find one: what a version left in place too long, or filed too late, gets wrong."""
        space = self.table.space
        for _ in range(100):
            box = rng.choice(inside["any_of"]) if "any_of" in inside else inside
            attrs = {d: rng.uniform(*_bounds(box[d])) for d in space.names}
            point = {mid: tuple(attrs[d] for d in space.names)}
            if oracle(space, {"s": ("q", inside)}, point) and not oracle(space, {"s": ("q", outside)}, point):
                await self.one(mid, attrs)
                return


    async def probes_later(self, rng: random.Random, prefix: str, old: dict, new: dict) -> None:
        await asyncio.sleep(0.15)
        await asyncio.gather(self.probe(rng, f"{prefix}-old-later", old, new),
                             self.probe(rng, f"{prefix}-new-later", new, old))


def _bounds(cond: list | dict) -> tuple[float, float]:
    """The range of one of `version`'s conditions: [low, high], or {gte, lt, not_in}."""
    return (cond[0], cond[1]) if isinstance(cond, list) else (cond["gte"], cond["lt"])


async def replace_repeatedly(pub: Publisher, rng: random.Random, sid: str, queue: str, auth: dict,
                             versions: list) -> None:
    """ROUNDS replaces of one subscription, one after the other (some back to back); each
    version with the times its PUT was sent and answered. Around each, probes: one answered
    before it was sent that the old version alone matches, and once it is answered one that
    the old version alone matches and one that the new one alone does; again 0.15 s later,
    while the next replaces go on (the catalogue tail applies a change 0.1 s after reading it:
    had it undone a newer version a dispatcher's call brought, it would show then)."""
    old, owners = versions[-1][0], versions[-1][3]
    later = []
    for j in range(ROUNDS):
        await asyncio.sleep(rng.choice([0.0, 0.05, rng.uniform(0.2, 0.8)]))
        preds, owners = version(rng, pub.table, owners)
        await pub.probe(rng, f"{sid}-{j}-before", old, preds)
        sent = time.monotonic()
        r = await pub.client.put(f"/v1/subscriptions/{sid}", json={"predicates": preds}, headers=auth)
        versions.append((preds, sent, time.monotonic(), owners))
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["id"], body["queue"]) == (sid, queue) and set(body) == {"id", "queue", "predicates"}
        await asyncio.gather(pub.probe(rng, f"{sid}-{j}-old", old, preds), pub.probe(rng, f"{sid}-{j}-new", preds, old))
        later.append(asyncio.create_task(pub.probes_later(rng, f"{sid}-{j}", old, preds)))
        old = preds
    await asyncio.gather(*later)


def judge(space, subs: dict, messages: dict, msg_times: dict, got: list) -> tuple[dict, int, int]:
    """The differences between what arrived and what the versions allow (as timed_compare's),
    how many deliveries every possible version called for, and how many messages some version
    of a subscription matches but none that may have been in effect does (a stale version
    would have delivered them)."""
    must, may, excluded = set(), set(), 0
    for sid, (q, versions) in subs.items():
        hits = [{mid for (_q, mid) in oracle(space, {sid: (q, v[0])}, messages)} for v in versions]
        for mid in messages:
            m_sent, m_done = msg_times[mid]
            possible = [j for j, (_p, s_sent, *_) in enumerate(versions)
                        if s_sent <= m_done and (j + 1 == len(versions) or versions[j + 1][2] >= m_sent)]
            verdicts = [mid in hits[j] for j in possible]
            if all(verdicts):
                must.add((q, mid))
            if any(verdicts):
                may.add((q, mid))
            elif any(mid in h for h in hits):
                excluded += 1
    seen: dict[tuple[str, str], list[str]] = {}
    dups = []
    for q, m in got:
        if (q, m["id"]) in seen:
            dups.append((q, m["id"]))
        seen[(q, m["id"])] = m["subscriptions"]
    owner = {q: sid for sid, (q, _v) in subs.items()}
    diff = {"missing": sorted(must - set(seen))[:10], "unexpected": sorted(set(seen) - may)[:10],
            "duplicates": dups[:10], "wrong_subscriptions": [k for k, v in seen.items() if v != [owner[k[0]]]][:10]}
    return diff, len(must), excluded


def test_replaces_under_a_steady_publisher_deliver_by_the_version_in_effect(updated):
    rng = random.Random(20270315)
    table = updated.table
    subs: dict[str, tuple[str, list]] = {}
    queues: dict[str, dict] = {}
    with httpx.Client(base_url=updated.url, timeout=30) as api:
        for _ in range(N_SUBS):  # a queue each: a delivery names one subscription
            q, auth = new_queue(api)
            preds, owners = version(rng, table, None)
            r = api.post("/v1/subscriptions", json={"queue": q, "predicates": preds}, headers=auth)
            assert r.status_code == 201, r.text
            queues[q] = auth
            subs[r.json()["id"]] = (q, [(preds, NEVER, NEVER, owners)])

    async def run() -> tuple[Publisher, list]:
        done = asyncio.Event()
        async with httpx.AsyncClient(base_url=updated.url, timeout=30) as client:
            pub = Publisher(client, table)
            steady = asyncio.create_task(pub.steadily(rng, done))
            await asyncio.sleep(1.0)
            await asyncio.gather(*(replace_repeatedly(pub, rng, sid, q, queues[q], versions)
                                   for sid, (q, versions) in subs.items()))
            done.set()
            await steady
            got = await drain(client, queues)
            for sid, (q, versions) in subs.items():  # GET shows the version answered last
                r = await client.get(f"/v1/subscriptions/{sid}", headers=queues[q])
                assert r.json()["predicates"] == versions[-1][0]
        return pub, got

    pub, got = asyncio.run(run())
    messages, refused = pub.messages, pub.refused
    diff, must, excluded = judge(updated.space, subs, messages, pub.times, got)
    assert diff == {"missing": [], "unexpected": [], "duplicates": [], "wrong_subscriptions": []}
    probes = sum("-old" in m or "-new" in m for m in messages)
    assert len(messages) >= 200 and must > 200 and excluded > 100 and probes > 100, \
        (len(messages), must, excluded, probes)
    assert len(refused) < len(messages) / 10  # a replace holds no publish up


def test_back_to_back_replaces_are_not_undone_by_the_catalogue_tail(updated):
    """Two replaces within the catalogue tail's linger (0.1 s): a tail that read the first
    only after the second's call was applied must not bring the first back (a version is its
    log entry; the newest applied wins). Messages only the first version matches, published
    every 20 ms for 0.4 s after the second replace, are delivered to no one."""
    lo, hi = zip(*(updated.table.segments_of(next(iter(updated.table.members)))[i] for i in range(4)))
    names = updated.table.space.names

    def box(a: float, b: float) -> dict:  # x0 in [a, b) of the owner's segment, the rest its whole region
        w = hi[0] - lo[0]
        return {n: [lo[0] + a * w, lo[0] + b * w] if i == 0 else [lo[i], hi[i]] for i, n in enumerate(names)}

    def point(at: float) -> dict:
        return {n: lo[i] + (at if i == 0 else 0.5) * (hi[i] - lo[i]) for i, n in enumerate(names)}

    with httpx.Client(base_url=updated.url, timeout=30) as api:
        q, auth = new_queue(api)
        for j in range(5):
            sid = api.post("/v1/subscriptions", json={"queue": q, "predicates": box(0.9, 1)}, headers=auth).json()["id"]
            time.sleep(0.3)
            for preds in (box(0, 0.4), box(0.6, 1)):
                assert api.put(f"/v1/subscriptions/{sid}", json={"predicates": preds}, headers=auth).status_code == 200
            for k in range(20):
                r = api.post("/v1/messages", json={"attributes": point(0.2), "id": f"b2b-{j}-{k}"})
                assert r.status_code == 202, r.text
                time.sleep(0.02)
            assert api.post("/v1/messages", json={"attributes": point(0.8), "id": f"b2b-{j}-now"}).status_code == 202
            got = api.get(f"/v1/queues/{q}/messages", params={"max": 100}, headers=auth).json()["messages"]
            assert [m["id"] for m in got] == [f"b2b-{j}-now"], j
            api.post(f"/v1/queues/{q}/ack", json={"receipts": [m["receipt"] for m in got]}, headers=auth)
            assert api.delete(f"/v1/subscriptions/{sid}", headers=auth).status_code == 204


# -- errors: each answered before anything changes ---------------------------------------------------
def test_errors_name_the_problem_and_change_nothing(updated):
    redis = sync_client(updated.store_url)
    with httpx.Client(base_url=updated.url, timeout=30) as api:
        q, auth = new_queue(api)
        other, other_auth = new_queue(api)
        sid = api.post("/v1/subscriptions", json={"queue": q, "predicates": {"x0": [10, 20]}},
                       headers=auth).json()["id"]
        theirs = api.post("/v1/subscriptions", json={"queue": other, "predicates": {}},
                          headers=other_auth).json()["id"]
        stored = api.get(f"/v1/subscriptions/{sid}", headers=auth).json()
        size = catalogue_size(redis)
        mine, good = f"/v1/subscriptions/{sid}", {"predicates": {"x0": [1, 2]}}
        cases = [
            (mine, {"predicates": {"x0": [5, 1]}}, auth, 422, "invalid_subscription", "predicates.x0"),
            (mine, {"predicates": {"nope": [1, 2]}}, auth, 422, "invalid_subscription", "predicates.nope"),
            (mine, {"predicates": {"x0": {"in": []}}}, auth, 422, "invalid_subscription", "predicates.x0.in"),
            (mine, {}, auth, 422, "invalid_subscription", "predicates"),
            (mine, {"queue": other, "predicates": {}}, auth, 422, "invalid_subscription", "queue"),
            (mine, {"predicates": {}, "extra": 1}, auth, 422, "invalid_subscription", "extra"),
            (mine, good, {}, 401, "unauthorized", None),
            (mine, good, {"Authorization": "Bearer bdq_wrong"}, 401, "unauthorized", None),
            (mine, good, other_auth, 404, "not_found", None),  # another queue's token
            ("/v1/subscriptions/no-such-id", good, auth, 404, "not_found", None),
            (f"/v1/subscriptions/{theirs}", good, auth, 404, "not_found", None),  # exists, not this queue's
        ]
        answers: dict[int, set[str]] = {}
        for path, body, headers, status, code, field in cases:
            r = api.put(path, json=body, headers=headers)
            error = r.json()["error"]
            assert (r.status_code, error["code"], error.get("field")) == (status, code, field), (path, body, r.text)
            answers.setdefault(status, set()).add(r.text.replace(sid, "ID").replace(theirs, "ID").replace(
                "no-such-id", "ID"))
            assert api.get(f"/v1/subscriptions/{sid}", headers=auth).json() == stored
            assert catalogue_size(redis) == size, (path, body)
        assert len(answers[404]) == 1  # an id of another queue reads as an unknown one
        assert api.put(f"/v1/subscriptions/{sid}", content=b"[1]", headers=auth).status_code == 422
        assert api.put(f"/v1/subscriptions/{sid}", content=b"{", headers=auth).status_code == 400
        assert catalogue_size(redis) == size
    redis.close()


# -- gRPC, the SDK and the CLI -------------------------------------------------------------------------
def test_grpc_update_subscription_round_trip(updated):
    with Client(updated.url) as c:
        q = c.create_queue()
        s = c.subscribe(q, x0=(0, 100))
    md = (("authorization", f"Bearer {q.token}"),)
    with grpc.insecure_channel(updated.grpc_address) as ch:
        stub = pb_grpc.PubSubStub(ch)
        req = pb.UpdateSubscriptionRequest(id=s.id, predicates={"x1": pb.Range(low=10, high=2000)})
        info = stub.UpdateSubscription(req, metadata=md, timeout=10)
        assert (info.id, info.queue, dict(info.predicates)) == (s.id, q.id, {"x1": pb.Range(low=10, high=1000)})
        assert stub.GetSubscription(pb.SubscriptionRef(id=s.id), metadata=md, timeout=10) == info
        for sub_id, preds, metadata, code, slug in [
                ("no-such-id", {}, md, grpc.StatusCode.NOT_FOUND, "not_found"),
                (s.id, {"x0": pb.Range(low=5, high=1)}, md, grpc.StatusCode.INVALID_ARGUMENT, "invalid_subscription"),
                (s.id, {}, (("authorization", "Bearer bdq_wrong"),), grpc.StatusCode.UNAUTHENTICATED, "unauthorized")]:
            with pytest.raises(grpc.RpcError) as err:
                stub.UpdateSubscription(pb.UpdateSubscriptionRequest(id=sub_id, predicates=preds), metadata=metadata,
                                        timeout=10)
            assert err.value.code() == code
            assert ("bluedove-error-code", slug) in err.value.trailing_metadata()
        assert stub.GetSubscription(pb.SubscriptionRef(id=s.id), metadata=md, timeout=10) == info  # unchanged



@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_the_sdk_replaces_a_subscription_s_predicates(updated, transport):
    url = updated.url if transport == "rest" else updated.grpc_url
    with Client(url) as c:
        q = c.create_queue()
        s = c.subscribe(q, x0=(0, 100))
        assert c.update_subscription(s, x0=(500, 600), x1=(-5, 2000)) is s
        assert s.predicates == {"x0": [500, 600], "x1": [0, 1000]}  # as stored: clipped to the space
        assert c.get_subscription(s.id, q).predicates == s.predicates
        old = c.publish({"x0": 50, "x1": 1, "x2": 1, "x3": 1}, id=f"old-{transport}")
        new = c.publish({"x0": 550, "x1": 1, "x2": 1, "x3": 1}, id=f"new-{transport}")
        got = q.deliveries(wait=2)
        assert [(d.id, d.subscriptions) for d in got] == [(new, [s.id])] and old != new
        q.ack(got)
        with pytest.raises(InvalidSubscription) as bad:
            c.update_subscription(s, x0=(5, 1))
        assert bad.value.field == "predicates.x0"
        with pytest.raises(NotFound):
            c.update_subscription(Subscription("no-such-id", q), x0=(1, 2))
        with pytest.raises(Unauthorized):
            c.update_subscription(Subscription(s.id, c.queue(q.id, "bdq_wrong")), x0=(1, 2))
        assert s.update({"x2": (1, 2)}).predicates == {"x2": [1, 2]}  # the whole filter: x0, x1 are gone

    async def run() -> dict:
        async with AsyncClient(url) as ac:
            aq = ac.queue(q.id, q.token)
            return (await ac.update_subscription(Subscription(s.id, aq), x3=(7, 8))).predicates

    assert asyncio.run(run()) == {"x3": [7, 8]}


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_the_cli_resubscribes(updated, transport):
    url = updated.url if transport == "rest" else updated.grpc_url
    with Client(url) as c:
        q = c.create_queue()
        s = c.subscribe(q, x0=(0, 100))
    r = subprocess.run([sys.executable, "-m", "bluedove", "resubscribe", s.id, "--url", url, "--token", q.token,
                        "--x0", "200:300"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"id": s.id, "predicates": {"x0": [200, 300]}}
    r = subprocess.run([sys.executable, "-m", "bluedove", "resubscribe", "no-such-id", "--url", url, "--token", q.token,
                        "--x0", "200:300"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "not_found" in r.stderr
