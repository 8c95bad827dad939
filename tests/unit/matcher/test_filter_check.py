"""The batch check after the index (bluedove/matcher/filter_check.py) against the language's
meaning written directly (the oracle of tests/unit/core/test_filters.py): random typed spaces,
filters of every operator and messages, every (message, filter) pair of a batch at once; and
condition ids released with their filters and reused without mixing them up."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bluedove.core.attributes import NUMBER, STRING, Attribute
from bluedove.core.filters import parse_filter
from bluedove.core.space import Space
from bluedove.matcher.filter_check import CompiledFilters, allowed
from tests.unit.core.test_filters import filters, messages, oracle, spaces


def _all_pairs(n_msgs: int, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    msg, code = np.meshgrid(np.arange(n_msgs), np.arange(n_codes), indexing="ij")
    return msg.ravel().astype(np.int64), code.ravel().astype(np.int64)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_batch_is_checked_as_the_language_says(data):
    space = data.draw(spaces())
    preds = data.draw(st.lists(filters(space), min_size=1, max_size=6))
    msgs = data.draw(st.lists(messages(space), min_size=1, max_size=8))
    parsed = [parse_filter(p, space) for p in preds]
    pm, pc = _all_pairs(len(msgs), len(preds))
    want = [oracle(space, preds[c], msgs[m]) for m, c in zip(pm.tolist(), pc.tolist())]
    checked = CompiledFilters()  # every filter checked, even those the boxes decide
    for code, f in enumerate(parsed):
        checked.add(code, replace(f, exact=False))
    assert checked.check(pm, pc, lambda m: msgs[m]).tolist() == want
    book = CompiledFilters()  # as a matcher holds them: a filter its boxes decide holds for what the index hands it
    for code, f in enumerate(parsed):
        book.add(code, f)
    got = book.check(pm, pc, lambda m: msgs[m])
    want = [parsed[c].exact or w for w, c in zip(want, pc.tolist())]
    assert got.tolist() == want


def test_a_condition_id_is_reused_only_after_every_filter_holding_it_is_dropped():
    space = Space.of((Attribute("city", STRING), Attribute("n", NUMBER, False, 0, 10)), ("n",))
    book = CompiledFilters()
    book.add(0, parse_filter({"city": {"prefix": "Pa"}}, space))
    book.add(1, parse_filter({"city": {"prefix": "Pa"}, "n": {"gte": 5}}, space))
    book.drop(0)  # the prefix is still held by code 1
    book.add(2, parse_filter({"city": "Lyon"}, space))
    book.drop(1)  # now the prefix and `gte` go; their ids are free
    book.add(3, parse_filter({"city": {"suffix": "is"}, "n": {"lt": 5}}, space))
    msgs = [{"city": "Paris", "n": 7}, {"city": "Lyon", "n": 1}, {"city": "Tunis", "n": 2}]
    got = book.check(np.array([0, 0, 1, 1, 2, 2]), np.array([2, 3, 2, 3, 2, 3]), lambda m: msgs[m])
    assert got.tolist() == [False, False, True, False, False, True]
    assert sum(c is not None for c in book.condition) == 3  # Lyon, suffix, lt


def test_strings_sharing_a_prefix_or_holding_nul_are_told_apart():
    distinct = sorted(["", "a", "a\x00", "a\x00b", "ab", "b", "é"])
    assert allowed(distinct, "prefix", "a") == bytes([0, 1, 1, 1, 1, 0, 0, 0])
    assert allowed(distinct, "prefix", "a\x00") == bytes([0, 0, 1, 1, 0, 0, 0, 0])
    assert allowed(distinct, "prefix", "") == bytes([1] * 7 + [0])
    assert allowed(distinct, "eq", "a") == bytes([0, 1, 0, 0, 0, 0, 0, 0])
    assert allowed(distinct, "not_in", frozenset({"a", "zz"})) == bytes([1, 0, 1, 1, 1, 1, 1, 0])
    assert allowed(distinct, "gt", "a\x00") == bytes([0, 0, 0, 1, 1, 1, 1, 0])
    assert allowed(distinct, "exists", False) == bytes([0] * 7 + [1])
    assert allowed(distinct, "suffix", "b") == bytes([0, 0, 0, 1, 1, 1, 0, 0])


def test_number_ranges_include_or_exclude_their_bound_as_the_operator_says():
    distinct = [-0.0, 1, 5.0, 7.5]  # an int and a float among the values, -0.0 equal to 0
    assert allowed(distinct, "lte", 5) == bytes([1, 1, 1, 0, 0])
    assert allowed(distinct, "lt", 5) == bytes([1, 1, 0, 0, 0])
    assert allowed(distinct, "gte", 5) == bytes([0, 0, 1, 1, 0])
    assert allowed(distinct, "gt", 5) == bytes([0, 0, 0, 1, 0])
    assert allowed(distinct, "eq", 0.0) == bytes([1, 0, 0, 0, 0])
    assert allowed(distinct, "in", frozenset({1.0, 7.5, 9})) == bytes([0, 1, 0, 1, 0])
    assert allowed([False, True], "eq", True) == bytes([0, 1, 0])
