"""The matcher's book of filters (bluedove/matcher/filter_book.py): equal filters share one object,
so `refine` checks a message against each distinct filter once, and each subscription still
matches, or stops matching, on its own."""

from __future__ import annotations

import json

import numpy as np

from bluedove.core.attributes import NUMBER, STRING, Attribute
from bluedove.core.model import build_subscription
from bluedove.core.space import Space
from bluedove.core.wire import Part, typed_bodies
from bluedove.matcher.filter_book import FilterBook, reader, refine
from bluedove.matcher.index import SubscriptionSet

SPACE = Space.of((Attribute("region", STRING), Attribute("sku", STRING), Attribute("amount", NUMBER, False, 0, 100)),
                 ("region", "amount"))
SAME = {"region": "us-east-1", "sku": {"prefix": "EL-"}}


def _part(messages: list[dict]) -> Part:
    by = [SPACE.by_name[d.name] for d in SPACE.dimensions]
    points = np.array([[a.coordinate(m[a.name]) for a in by] for m in messages], dtype=np.float64)
    body = typed_bodies([b"m%d" % i for i in range(len(messages))], [json.dumps(m).encode() for m in messages],
                        [b"null"] * len(messages), b"t")
    ends = np.cumsum([len(b) for b in body]).astype(np.uint32)
    return Part(0, points, b"", np.zeros(len(body), dtype=np.uint32), b"".join(body), ends,
                np.zeros(len(body), dtype=bool))


def _book_and_set(preds: dict[str, dict]) -> tuple[FilterBook, SubscriptionSet]:
    book, s = FilterBook(SPACE), SubscriptionSet(SPACE.k)
    for sid, p in preds.items():
        sub = build_subscription(sid, f"q{sid}", p, SPACE)
        book.learn(sub)
        for key, lo, hi in sub.rows():
            s.add(key, sub.queue, lo, hi)
    s.book = book
    return book, s


def _matched(s: SubscriptionSet, part: Part) -> list[list[str]]:
    ids, counts = refine(s.directory, s.book, *s.match_ids(part.points), reader([part]))
    out, pos = [], 0
    for c in counts.tolist():
        out.append(sorted(str(s.directory.sid[i]) for i in ids[pos:pos + c].tolist()))
        pos += c
    return out


def test_equal_filters_share_one_object_and_each_subscription_matches_on_its_own():
    book, s = _book_and_set({"a": SAME, "b": dict(SAME), "c": {"region": "us-east-2", "sku": {"prefix": "EL-"}}})
    assert book.by_id["a"][0] is book.by_id["b"][0] and len(book._shared) == 2
    part = _part([{"region": "us-east-1", "sku": "EL-1", "amount": 5.0},   # a, b (c shares the region's cell)
                  {"region": "us-east-2", "sku": "EL-1", "amount": 5.0},   # c
                  {"region": "us-east-1", "sku": "HO-1", "amount": 5.0}])  # none
    assert _matched(s, part) == [["a", "b"], ["c"], []]
    book.forget(["a"])  # a subscription removed: it stops matching, the one sharing its filter does not
    assert _matched(s, part)[0] == ["b"] and len(book._shared) == 2
    book.forget(["b"])
    assert len(book._shared) == 1 and _matched(s, part)[0] == []


def test_learning_a_new_filter_for_an_id_releases_the_old_one():
    book, _ = _book_and_set({"a": SAME})
    book.learn(build_subscription("a", "qa", {"region": "eu-west-1", "sku": {"prefix": "HO-"}}, SPACE))
    assert len(book) == 1 and len(book._shared) == 1
    assert book.predicates(["a"]) == {"a": {"region": "eu-west-1", "sku": {"prefix": "HO-"}}}
