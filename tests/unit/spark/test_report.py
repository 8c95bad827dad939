"""The seed's report in words: string coordinates read back, whole-number cuts, and the choice
of the partition attributes by its stated rule."""

from __future__ import annotations

import pytest

from bluedove.core.attributes import STRING_TOP, encode
from bluedove.spark import report as R
from bluedove.spark.job import COORDINATES


def test_a_coordinate_reads_back_as_the_six_byte_prefix_it_stands_for():
    assert COORDINATES["string"] == STRING_TOP  # the job's copy of the core's encoding
    assert R.decode(encode("eu-west-1")) == "eu-wes" and R.decode(encode("")) == ""
    assert R.decode(encode("ab") + 0.5) == "ab"  # a cut between coordinates names the one below
    assert R.decode(encode("日本-東京")) == "日本"  # two characters of three bytes
    assert R.decode(encode("a€€")) == "a€\\xe2\\x82"  # a character cut by the 6th byte: its bytes as escapes
    assert R.label(encode("us-east-1"), "string", STRING_TOP) == '"us-eas"'
    assert R.label(STRING_TOP, "string", STRING_TOP) == "end"
    assert [R.label(x, "boolean", 2.0) for x in (0.0, 1.0, 2.0)] == ["false", "true", "end"]
    assert R.label(12.5, "number", 100.0) == "12.5"


def test_whole_cuts_round_up_unless_two_would_meet():
    assert R.whole_cuts([10.2, 20.0, 30.7], 0.0, 100.0) == [11.0, 20.0, 31.0]
    assert R.whole_cuts([10.2, 10.7], 0.0, 100.0) == [10.2, 10.7]  # both would be 11
    assert R.whole_cuts([99.5], 0.0, 100.0) == [99.5]  # 100 is the end


def rows(**scores):
    return [{"name": n, "constrained": c, "score": s} for n, (c, s) in scores.items()]


def test_the_recommendation_takes_the_highest_scores_then_the_most_constrained():
    r = rows(a=(0.9, 0.2), b=(0.5, 0.4), c=(0.8, 0.2), d=(0.1, 0.0))
    assert R.recommend(r, ["a", "d"], None) == ["b", "a"]  # as many as the partition has; ties: constrained
    assert R.recommend(r, ["a", "d"], 3) == ["b", "a", "c"]
    assert R.recommend(r, ["a"], 10) == ["b", "a", "c"]  # a score of 0 narrows nothing: left out


def test_rows_take_the_messages_fraction_when_sampled_else_the_ranges():
    attrs = [("region", "string", 0.0, STRING_TOP), ("amount", "number", 0.0, 100.0), ("note", "string", 0.0, 1.0)]
    got = R.attribute_rows(attrs, ["region"], {"region": (4, 1.0, 2.8), "amount": (2, 0.6, None)}, 8)
    assert got[0] | {} == {"name": "region", "type": "string", "partition": True, "constrained": 0.5,
                           "domain_fraction": 0.25, "message_fraction": pytest.approx(0.7),
                           "selectivity": pytest.approx(0.7), "score": pytest.approx(0.5 * 0.3)}
    assert got[1]["message_fraction"] is None and got[1]["score"] == pytest.approx(0.25 * 0.7)
    assert got[2]["constrained"] == 0.0 and got[2]["score"] == 0.0 and got[2]["domain_fraction"] == 1.0
    lines = R.summary({"by_attribute": got, "recommended": ["region"], "partition": ["region"]})
    assert lines[-1] == "recommended partition: region (now: region)"
    assert "region: constrained by 50% of subscriptions, admitting 0.7 of the messages" in lines[1]
