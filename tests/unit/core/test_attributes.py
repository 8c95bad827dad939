"""A string dimension's coordinates as text (bluedove/core/attributes.py `label`): what the
dashboard shows for a segment's ends on a string attribute."""

from __future__ import annotations

import pytest

from bluedove.core.attributes import STRING_TOP, encode, label, prefix_interval


@pytest.mark.parametrize("s", ["eu", "us-eas", "a", "Z", "é", "日本", "a b"])
def test_a_string_s_own_coordinate_reads_back_as_its_first_bytes(s):
    assert label(encode(s)) == s


def test_the_dimension_s_ends_and_the_empty_prefix():
    assert label(0.0) == ""  # the space's min: every string from the empty one on
    assert label(encode("")) == ""
    assert label(STRING_TOP) is None  # the space's max: past every string
    assert label(STRING_TOP + 5) is None
    assert label(-3.0) == ""
    lo, hi = prefix_interval("")
    assert (label(lo), label(hi)) == ("", None)
    assert label(STRING_TOP - 1) == "\\xff" * 6  # the last coordinate: 6 bytes of 0xff, no character


def test_longer_strings_show_their_cell_and_a_prefix_its_interval():
    assert label(encode("us-east-1")) == "us-eas"  # the coordinate holds 6 bytes
    assert [label(x) for x in prefix_interval("us-")] == ["us-", "us."]  # up to the next prefix
    assert label(encode("a\0")) == "a"  # zero padding is not shown


def test_a_cut_between_two_coordinates_names_the_first_string_above_it():
    assert label(encode("eu") + 0.5) == "eu\\x00\\x00\\x00\\x01"  # the next coordinate: "eu" + 0 0 0 1
    mid = (encode("eu") + encode("us")) / 2 + 0.25
    assert label(mid) == label(float(int(mid) + 1))


def test_bytes_of_no_whole_character_and_unprintable_ones_are_escaped():
    assert label(encode("日本")) == "日本"
    assert label(encode("a\0b")) == "a\\x00b"
    assert label(encode("a\\b")) == "a\\\\b"
    assert label(encode('"a"')) == '\\"a\\"'  # shown between double quotes
    assert label(encode("\n")) == "\\n"
    assert label(float(int.from_bytes(b"ab\xe6\x97", "big") << 16)) == "ab\\xe6\\x97"  # a character cut short
