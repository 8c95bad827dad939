"""bluedove/core/space.py: the default space, YAML loading, and every SpaceError naming its key."""

from __future__ import annotations

import math

import pytest

from bluedove.core.space import Dimension, Space, SpaceError, default_space, load_space, read_space_file


def dims(*entries: dict) -> dict:
    return {"dimensions": list(entries)}


# -- the default space -----------------------------------------------------------------------


def test_default_space_is_the_papers_four_dimensions():
    s = default_space()
    assert s.k == 4
    assert s.names == ("x0", "x1", "x2", "x3")
    assert all((d.min, d.max) == (0.0, 1000.0) for d in s.dimensions)


def test_load_space_without_a_path_gives_the_default():
    assert load_space(None) == default_space()


def test_index_finds_a_dimension_and_rejects_an_unknown_one():
    s = default_space()
    assert s.index("x0") == 0
    assert s.index("x3") == 3
    with pytest.raises(ValueError):
        s.index("x4")


def test_to_json_renders_whole_numbers_as_ints():
    s = Space((Dimension("a", 0.0, 1000.0), Dimension("b", -0.5, 2.25)))
    assert s.to_json() == {"dimensions": [{"name": "a", "min": 0, "max": 1000},
                                          {"name": "b", "min": -0.5, "max": 2.25}]}
    assert isinstance(s.to_json()["dimensions"][0]["min"], int)


@pytest.mark.parametrize("s", [
    default_space(),
    Space((Dimension("price", -10.5, 99.25),)),
    Space((Dimension("a", 0.0, 1.0), Dimension("b", 1e-9, 2e15))),
])
def test_json_round_trip(s):
    assert Space.from_json(s.to_json()) == s


def test_from_json_turns_bounds_into_floats():
    s = Space.from_json(dims({"name": "a", "min": 0, "max": 10}))
    assert s.dimensions[0] == Dimension("a", 0.0, 10.0)
    assert isinstance(s.dimensions[0].min, float) and isinstance(s.dimensions[0].max, float)


# -- every SpaceError names its key ---------------------------------------------------------

OK = {"name": "x0", "min": 0, "max": 10}


@pytest.mark.parametrize("data, key", [
    # not a space at all
    (None, "space"),
    ([], "space"),
    ({}, "space"),
    ({"dimensions": "x0"}, "space"),
    ({"dimensions": []}, "space"),
    # an entry that is not a mapping
    (dims("x0"), "dimensions[0]"),
    (dims(OK, ["x1", 0, 10]), "dimensions[1]"),
    # names
    (dims({"min": 0, "max": 1}), "dimensions[0].name"),
    (dims({"name": "", "min": 0, "max": 1}), "dimensions[0].name"),
    (dims({"name": "x-1", "min": 0, "max": 1}), "dimensions[0].name"),
    (dims({"name": "1x", "min": 0, "max": 1}), "dimensions[0].name"),
    (dims({"name": 7, "min": 0, "max": 1}), "dimensions[0].name"),
    (dims(OK, {"name": None, "min": 0, "max": 1}), "dimensions[1].name"),
    # bounds: missing, not numbers, not finite
    (dims({"name": "a", "max": 1}), "dimensions[0].min"),
    (dims({"name": "a", "min": 0}), "dimensions[0].max"),
    (dims({"name": "a", "min": "0", "max": 1}), "dimensions[0].min"),
    (dims({"name": "a", "min": 0, "max": "1e3"}), "dimensions[0].max"),
    (dims({"name": "a", "min": False, "max": 1}), "dimensions[0].min"),
    (dims({"name": "a", "min": 0, "max": True}), "dimensions[0].max"),
    (dims({"name": "a", "min": math.nan, "max": 1}), "dimensions[0].min"),
    (dims({"name": "a", "min": -math.inf, "max": 1}), "dimensions[0].min"),
    (dims({"name": "a", "min": 0, "max": math.inf}), "dimensions[0].max"),
    (dims(OK, {"name": "b", "min": 0, "max": [1]}), "dimensions[1].max"),
    # min must be below max
    (dims({"name": "a", "min": 5, "max": 5}), "dimensions[0]"),
    (dims(OK, {"name": "b", "min": 6, "max": 5}), "dimensions[1]"),
    # unknown keys: a misspelt or unsupported setting is an error, not ignored
    (dims({"name": "a", "min": 0, "max": 1, "unit": "deg"}), "dimensions[0].unit"),
    (dims(OK, {"name": "b", "min": 0, "max": 1, "Max": 2}), "dimensions[1].Max"),
    ({"dimensions": [OK], "dimension": []}, "dimension"),
])
def test_from_json_errors_name_the_key(data, key):
    with pytest.raises(SpaceError) as exc:
        Space.from_json(data)
    assert str(exc.value).startswith(f"{key}:")


def test_duplicate_names_are_rejected_naming_the_duplicate():
    with pytest.raises(SpaceError) as exc:
        Space.from_json(dims(OK, {"name": "x1", "min": 0, "max": 1}, {"name": "x0", "min": 0, "max": 1}))
    assert "unique" in str(exc.value)
    assert "'x0'" in str(exc.value)


def test_space_error_is_a_value_error():
    # Callers that only know ValueError (argument parsers) still catch it.
    assert issubclass(SpaceError, ValueError)


# -- YAML files ------------------------------------------------------------------------------


def test_load_space_reads_a_yaml_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "dimensions:\n"
        "  - {name: price, min: 0, max: 500.5}\n"
        "  - {name: lat, min: -90, max: 90}\n"
    )
    s = load_space(path)
    assert s == Space((Dimension("price", 0.0, 500.5), Dimension("lat", -90.0, 90.0)))
    assert load_space(str(path)) == s  # a str path works too


def test_a_space_file_may_declare_the_default_spaces_log(tmp_path):
    """`retention_s` beside the space is the default space's log (None: the file leaves it out);
    `load_space` gives the space alone; a value that is not whole seconds within a year is
    refused naming the key."""
    path = tmp_path / "space.yaml"
    path.write_text("dimensions:\n  - {name: price, min: 0, max: 10}\nretention_s: 3600\n")
    space = Space((Dimension("price", 0.0, 10.0),))
    assert read_space_file(path) == (space, 3600) and load_space(path) == space
    path.write_text("dimensions:\n  - {name: price, min: 0, max: 10}\n")
    assert read_space_file(path) == (space, None)
    for bad in ("-1", "1.5", "true", "'1h'", str(367 * 86_400)):
        path.write_text(f"dimensions:\n  - {{name: price, min: 0, max: 10}}\nretention_s: {bad}\n")
        with pytest.raises(SpaceError) as info:
            read_space_file(path)
        assert info.value.field == "retention_s", bad


@pytest.mark.parametrize("text, key", [
    ("", "space"),  # an empty file is None, not a space
    ("- x0\n- x1\n", "space"),
    ("dimensions: []\n", "space"),
    ("dimensions:\n  - {name: a, min: 0, max: .inf}\n", "dimensions[0].max"),
    ("dimensions:\n  - {name: a, min: .nan, max: 1}\n", "dimensions[0].min"),
    ("dimensions:\n  - {name: a, min: 0, max: 1}\n  - {name: b, min: 3, max: 2}\n", "dimensions[1]"),
    # YAML 1.1 reads 1e3 (no dot) as a string: the error still says where.
    ("dimensions:\n  - {name: a, min: 0, max: 1e3}\n", "dimensions[0].max"),
])
def test_load_space_errors_name_the_key(tmp_path, text, key):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as exc:
        load_space(path)
    assert str(exc.value).startswith(f"{key}:")


def test_load_space_names_the_file_it_cannot_read(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(SpaceError) as exc:
        load_space(path)
    assert str(exc.value).startswith(f"{path}:")


def test_load_space_names_the_file_that_is_not_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("dimensions: [ {name: a\n")
    with pytest.raises(SpaceError) as exc:
        load_space(path)
    assert str(exc.value).startswith(f"{path}:")
