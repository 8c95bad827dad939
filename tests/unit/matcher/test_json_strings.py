"""`json_strings`: the matcher's subscription lists as stored JSON, equal to json.dumps's."""

from __future__ import annotations

import json
import uuid

from hypothesis import given
from hypothesis import strategies as st

from bluedove.matcher.matches import json_strings


@given(st.lists(st.text(max_size=12), max_size=6))
def test_any_strings_give_json_dumps_text(items):
    out = json_strings(items)
    assert out == json.dumps(items, separators=(",", ":")) and json.loads(out) == items


@given(st.lists(st.sampled_from(['"', "\\", "\n", "\x7f", "é", '","', "a", "", "\u2028"]), max_size=6))
def test_characters_that_need_escaping_take_json_dumps(items):
    out = json_strings(items)
    assert json.loads(out) == items and out == json.dumps(items, separators=(",", ":"))


def test_service_ids_are_joined_as_compact_json():
    ids = [uuid.uuid4().hex for _ in range(3)]
    assert json_strings(ids) == json.dumps(ids, separators=(",", ":"))
    assert json_strings([]) == "[]"
