"""The sample decision of the publish path (bluedove/dispatcher/sampler.py `Sampler.offer`), without the
writer thread: the share sampled follows the rate whatever the batch sizes, and a full buffer
drops samples and counts them."""

from __future__ import annotations

import random

import numpy as np
from prometheus_client import CollectorRegistry, Counter

from bluedove.core.space import default_space
from bluedove.dispatcher.sampler import Sampler


def sampler(rate: float, buffer_max: int = 10**7) -> tuple[Sampler, Counter]:
    r = CollectorRegistry()
    dropped = Counter("dropped", "", registry=r)
    s = Sampler(rate, "/nonexistent", "d1", default_space(), 300, 64, 48, Counter("sampled", "", registry=r),
                dropped, buffer_max=buffer_max)
    return s, dropped


def offer_batches(s: Sampler, n: int, seed: int) -> np.ndarray:
    """n messages in batches of random sizes 1..300; returns their values (point = (index,))."""
    rng = random.Random(seed)
    msgs = np.arange(n, dtype=np.float64).reshape(n, 1)
    i = 0
    while i < n:
        size = rng.randint(1, 300)
        s.offer(1.5, msgs[i:i + size])
        i += size
    return msgs


def test_the_sampled_share_is_binomial_at_each_rate():
    """At 0.01, 0.1 and 0.5 over 200,000 messages the count is within 5 standard deviations of
    n·rate (a countdown drawn wrongly, or reset per batch, is far outside); no message twice."""
    n = 200_000
    for rate in (0.01, 0.1, 0.5):
        s, _ = sampler(rate)
        offer_batches(s, n, seed=int(rate * 100))
        got = [p[0] for _, p, _ in s._buffer]
        sd = (n * rate * (1 - rate)) ** 0.5
        assert abs(len(got) - n * rate) <= 5 * sd, (rate, len(got))
        assert len(set(got)) == len(got)


def test_rate_1_takes_every_message_in_order():
    s, _ = sampler(1.0)
    offer_batches(s, 5000, seed=3)
    assert [p[0] for _, p, _ in s._buffer] == [float(i) for i in range(5000)]
    assert all(ts == 1.5 and attrs is None for ts, _, attrs in s._buffer)


def test_a_full_buffer_drops_and_counts():
    """Buffer of 100 at rate 1: 250 offered, the first 100 kept, 150 counted as dropped."""
    s, dropped = sampler(1.0, buffer_max=100)
    offer_batches(s, 250, seed=4)
    assert [p[0] for _, p, _ in s._buffer] == [float(i) for i in range(100)]
    assert dropped._value.get() == 150


def test_a_typed_space_is_sampled_as_its_coordinates_and_written_beside_them(tmp_path):
    """A typed space's points are its partition attributes' coordinates: the sample holds them,
    and DIR/space.json loads back as the space (bluedove/core/space.py, `to_json`). Each line also
    holds the message's attributes as stored, those not cut too (amount here), an optional one
    left out staying out."""
    import json

    from bluedove.core.space import Space
    from bluedove.dispatcher.publish.decode import Decoder

    space = Space.from_json({"attributes": [{"name": "region", "type": "string"}, {"name": "amount", "min": 0,
                                                                                  "max": 100},
                                            {"name": "express", "type": "boolean", "optional": True}],
                             "partition": ["region", "express"]})
    batch = Decoder(space).batch('{"messages": [{"attributes": {"region": "eu", "amount": 5, "express": true}}, '
                                 '{"attributes": {"amount": 1, "region": "日本\\n\\"x\\""}}]}'.encode())
    r = CollectorRegistry()
    s = Sampler(1.0, tmp_path, "d1", space, 300, 64, 48, Counter("sampled", "", registry=r),
                Counter("dropped", "", registry=r)).start()
    s.offer(1.5, batch.points, batch.attributes)
    s.stop()
    assert Space.from_json(json.loads((tmp_path / "space.json").read_text())) == space
    [part] = (tmp_path / "d1").glob("messages-*.jsonl")
    lines = [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines()]
    assert [line["point"] for line in lines] == batch.points.tolist()
    assert batch.points.tolist() == [[space.by_name["region"].coordinate("eu"), 1.0],
                                     [space.by_name["region"].coordinate('日本\n"x"'), 0.0]]
    assert [line["attributes"] for line in lines] == [{"region": "eu", "amount": 5.0, "express": True},
                                                      {"region": '日本\n"x"', "amount": 1.0}]
    assert [set(line) for line in lines] == [{"ts", "point", "attributes"}] * 2


def test_a_space_of_numbers_writes_its_lines_as_before(tmp_path):
    """No `attributes` in a space of numbers: the line is `{"ts", "point"}`, which the seed reads."""
    r = CollectorRegistry()
    s = Sampler(1.0, tmp_path, "d1", default_space(), 300, 64, 48, Counter("sampled", "", registry=r),
                Counter("dropped", "", registry=r)).start()
    s.offer(1.5, np.array([[1.0, 2.5, 0.0, 999.0]]))
    s.stop()
    [part] = (tmp_path / "d1").glob("messages-*.jsonl")
    assert part.read_text() == '{"ts":1.5,"point":[1.0,2.5,0.0,999.0]}\n'
