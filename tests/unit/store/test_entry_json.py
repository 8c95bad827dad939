"""The catalogue's JSON of a subscription (bluedove/store/catalogue.py `entry_json`): written by
msgspec, it reads back as what json.dumps wrote; a non-finite float, which msgspec would write
as null, is still written (by json.dumps) as Infinity or NaN."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.store.catalogue import entry_json

values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), values, max_size=5))
def test_an_entry_reads_back_as_json_dumps_wrote_it(sub):
    # (compared as json.dumps's text of what each reads back: NaN is not equal to itself)
    assert json.dumps(json.loads(entry_json(sub))) == json.dumps(json.loads(json.dumps(sub)))


def test_infinity_is_not_written_as_null_nor_a_lone_surrogate_refused():
    inf = float("inf")
    assert json.loads(entry_json({"predicates": {"x0": [-inf, 5.0]}})) == {"predicates": {"x0": [-inf, 5.0]}}
    assert json.loads(entry_json({"queue": "q\udc80"})) == {"queue": "q\udc80"}
    assert entry_json({"id": "s1", "queue": "q1", "predicates": {"x0": [1.5, 2.0]}}) == \
        '{"id":"s1","queue":"q1","predicates":{"x0":[1.5,2.0]}}'
