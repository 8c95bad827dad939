"""GET /v1/cluster's `labels` (bluedove/dispatcher/operations/cluster.py): a member's segments on a
string dimension as the strings they run between; numbers and booleans have none."""

from __future__ import annotations

from bluedove.core.attributes import STRING_TOP, label
from bluedove.core.partition.segments import equal_partition
from bluedove.core.space import Space, default_space
from bluedove.dispatcher.operations.cluster import _member_view
from bluedove.dispatcher.view import ClusterView
from bluedove.runtime.settings import DispatcherSettings

ORDERS = Space.from_json({"attributes": [{"name": "region", "type": "string"},
                                         {"name": "amount", "type": "number", "min": 0, "max": 1000},
                                         {"name": "express", "type": "boolean"}],
                          "partition": ["region", "amount", "express"]})


def members(space: Space, n: int = 3) -> dict[str, dict]:
    view = ClusterView(DispatcherSettings(id="d1"), store=None)
    table = equal_partition(space, {f"m{i}": f"a{i}" for i in range(1, n + 1)}, epoch=1)
    view._set_table(table)
    return {m: _member_view(view, table, m, 0.0, {}) for m in table.members}


def test_a_string_dimension_s_segments_carry_their_ends_as_strings():
    got = members(ORDERS)
    assert all(set(v["labels"]) == {"region"} for v in got.values() if "region" in v["segments"])
    ends = sorted((v["segments"]["region"], v["labels"]["region"]) for v in got.values() if "region" in v["segments"])
    assert ends[0][0][0] == 0 and ends[0][1][0] == ""  # the space's min: the empty string
    assert ends[-1][0][1] == STRING_TOP and ends[-1][1][1] is None  # its end: past every string
    for (lo, hi), (lo_text, hi_text) in ends:
        assert (lo_text, hi_text) == (label(lo), label(hi))
    for ((_, hi), (_, hi_text)), ((lo, _), (lo_text, _)) in zip(ends, ends[1:]):
        assert hi == lo and hi_text == lo_text  # neighbours meet
    # cut at a third (0x555555555555.5: the first string above, "UUUUUV") and at two thirds (bytes
    # that are no UTF-8 character, escaped)
    assert [lo_text for _, (lo_text, _) in ends] == ["", "UUUUUV", "\\xaa" * 5 + "\\xab"]


def test_a_space_of_numbers_has_no_labels():
    assert all(v["labels"] == {} for v in members(default_space()).values())
