"""bluedove/store/finite.py: whether a REST poll's body holds a bare NaN, Infinity or
-Infinity (what a delivery stored before publishing refused them may hold), exactly, whichever
of its paths decides (no capital N or I; msgspec reads it; its strings cut out)."""

from __future__ import annotations

import json

import pytest

from bluedove.store.finite import finite


def body(payload: str) -> str:
    return '{"messages":[{"id":"m0","attributes":{"x0":1.5},"payload":' + payload + ',"receipt":"1-0.ab"}]}'


DEEP = "[" * 5000 + "]" * 5000  # msgspec gives up (RecursionError): the strings-cut path decides
BIG = "9" * 5000  # strict JSON text, which msgspec skips without reading the integer


@pytest.mark.parametrize("payload", ["NaN", "Infinity", "-Infinity", "[1,NaN]", '{"a":-Infinity}', '["\\\\",NaN]',
                                     '["\\"",Infinity]', f"[{DEEP},NaN]", '["\\ud800",NaN]', f"[{BIG},NaN]",
                                     "[1,\nNaN]"])
def test_a_bare_word_is_found(payload):
    assert not finite(body(payload))


@pytest.mark.parametrize("payload", ["1", '"NaN"', '{"Infinity":"-Infinity"}', '["\\"NaN\\"","\\\\Infinity"]',
                                     '"Not a Number"', f'[{DEEP},"NaN"]', '["\\ud800","NaN"]', f'[{BIG},"NaN"]',
                                     '"NaN\\nInfinity"', "1e400"])
def test_the_words_in_strings_and_bodies_without_them_pass(payload):
    assert finite(body(payload))


def test_what_pythons_json_writes_for_a_non_finite_float_is_found_and_its_strict_form_passes():
    for value in (float("nan"), float("inf"), -float("inf")):
        assert not finite(body(json.dumps({"v": [value, "NaN"]})))
    assert finite(body(json.dumps({"v": [1.5, "NaN", "Infinity"]})))
