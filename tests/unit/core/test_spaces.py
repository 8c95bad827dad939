"""bluedove/core/spaces.py: a named space's spec from a request body, each fault a 422
`invalid_space` naming its field; its JSON round trip and canonical form (what "the same
space" is for a repeated create)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bluedove.core.errors import ApiError
from bluedove.core.space import Space, SpaceError, default_space, load_space
from bluedove.core.spaces import (
    DEFAULT_SPACE,
    MAX_ATTRIBUTES,
    Quotas,
    SpaceSpec,
    check_space_name,
    default_spec,
    first_difference,
    load_spaces_file,
    parse_space_spec,
    space_conflict,
)

ORDERS = {"name": "orders",
          "attributes": [{"name": "status", "type": "string"}, {"name": "amount", "min": 0, "max": 10000},
                         {"name": "coupon", "type": "string", "optional": True}, {"name": "vip", "type": "boolean"}],
          "partition": ["status", "amount"], "matchers": 4, "retention_s": 3600,
          "quotas": {"subscriptions": 1000, "messages_per_s": 500, "bytes_per_s": 1e6}}


def refused(body) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse_space_spec(body)
    assert info.value.status == 422 and info.value.code == "invalid_space"
    return info.value


@pytest.mark.parametrize("name", ["a", "orders", "orders-eu-1", "0", "-", "a" * 63, DEFAULT_SPACE])
def test_a_space_name_is_1_to_63_of_lowercase_digits_and_hyphens(name):
    assert check_space_name(name) == name
    assert parse_space_spec({**ORDERS, "name": name}).name == name


@pytest.mark.parametrize("name", ["", "a" * 64, "Orders", "ORDERS", "my_space", "a.b", "a b", "a:b", "{a}",
                                  "café", "ｏｒｄｅｒｓ", "orders\n", "\u0430", 7, None, ["a"], True])
def test_any_other_name_is_refused_naming_the_field(name):
    with pytest.raises(ApiError) as info:
        check_space_name(name, field="space")
    assert (info.value.status, info.value.code, info.value.field) == (422, "invalid_space", "space")
    if name is not None:  # a body without a name says it is required
        assert refused({**ORDERS, "name": name}).field == "name"


@pytest.mark.parametrize("change, field", [
    ({"name": None}, "name"),
    ({"attributes": None}, "attributes"),
    ({"attributes": []}, "attributes"),
    ({"attributes": "x"}, "attributes"),
    ({"attributes": [{"name": f"a{i}", "min": 0, "max": 1} for i in range(MAX_ATTRIBUTES + 1)]}, "attributes"),
    ({"attributes": [{"name": "a", "min": 0, "max": 1}, {"name": "a", "min": 0, "max": 1}]}, "attributes"),
    ({"attributes": ["status"]}, "attributes[0]"),
    ({"attributes": [*ORDERS["attributes"][:2], {"name": "x", "type": "text"}]}, "attributes[2].type"),
    ({"attributes": [{"name": "1x", "min": 0, "max": 1}]}, "attributes[0].name"),
    ({"attributes": [{"name": "x", "min": 0, "max": 1, "colour": 1}]}, "attributes[0].colour"),
    ({"attributes": [{"name": "x", "min": 0}]}, "attributes[0].max"),
    ({"attributes": [{"name": "x", "min": 0, "max": 10 ** 400}]}, "attributes[0].max"),
    ({"attributes": [{"name": "x", "min": float("nan"), "max": 1}]}, "attributes[0].min"),
    ({"attributes": [{"name": "x", "min": 2, "max": 1}]}, "attributes[0]"),
    ({"attributes": [{"name": "s", "type": "string", "max": 1}]}, "attributes[0].max"),
    ({"attributes": [{"name": "x", "min": 0, "max": 1, "optional": "yes"}]}, "attributes[0].optional"),
    ({"partition": ["nope"]}, "partition[0]"),
    ({"partition": ["amount", "nope"]}, "partition[1]"),
    ({"partition": ["amount", "amount"]}, "partition"),
    ({"partition": []}, "partition"),
    ({"partition": "amount"}, "partition"),
    ({"partition": None}, "partition"),  # a string attribute: the partition must be named
    ({"matchers": 0}, "matchers"),
    ({"matchers": 1.5}, "matchers"),
    ({"matchers": True}, "matchers"),
    ({"matchers": 10 ** 6}, "matchers"),
    ({"retention_s": -1}, "retention_s"),
    ({"retention_s": "1h"}, "retention_s"),
    ({"quotas": []}, "quotas"),
    ({"quotas": {"messages": 5}}, "quotas.messages"),
    ({"quotas": {"subscriptions": 0}}, "quotas.subscriptions"),
    ({"quotas": {"subscriptions": 2.5}}, "quotas.subscriptions"),
    ({"quotas": {"messages_per_s": 0}}, "quotas.messages_per_s"),
    ({"quotas": {"messages_per_s": -3}}, "quotas.messages_per_s"),
    ({"quotas": {"messages_per_s": "fast"}}, "quotas.messages_per_s"),
    ({"quotas": {"bytes_per_s": float("inf")}}, "quotas.bytes_per_s"),
    ({"quotas": {"bytes_per_s": False}}, "quotas.bytes_per_s"),
    ({"dimensions": []}, "dimensions"),
    ({"colour": "red"}, "colour"),
])
def test_every_fault_is_a_422_naming_its_field(change, field):
    err = refused({**ORDERS, **change})
    assert err.field == field
    assert err.body()["error"]["code"] == "invalid_space" and err.body()["error"]["field"] == field


@pytest.mark.parametrize("body", [None, [], "orders", 3])
def test_a_body_that_is_not_an_object_is_refused(body):
    assert refused(body).field == "body"


def test_a_spec_reads_its_fields_and_round_trips():
    spec = parse_space_spec(ORDERS)
    assert (spec.name, spec.matchers, spec.retention_s) == ("orders", 4, 3600)
    assert spec.quotas == Quotas(1000, 500.0, 1e6)
    assert spec.space.names == ("status", "amount") and spec.space.typed
    assert SpaceSpec.from_json(spec.to_json()) == spec
    assert SpaceSpec.from_json(json.loads(json.dumps(spec.to_json()))).canonical() == spec.canonical()
    assert json.loads(spec.canonical()) == spec.to_json()
    assert " " not in spec.canonical()


def test_what_is_left_out_takes_its_default_and_null_is_left_out():
    small = {"name": "s", "attributes": [{"name": "x", "min": 0, "max": 10}]}
    spec = parse_space_spec(small)
    assert (spec.matchers, spec.retention_s, spec.quotas) == (None, 0, Quotas())
    assert spec.to_json() == {"name": "s", "attributes": [{"name": "x", "type": "number", "min": 0, "max": 10}],
                              "partition": ["x"], "matchers": None, "retention_s": 0, "quotas": {}}
    nulls = {**small, "partition": None, "matchers": None, "retention_s": None, "quotas": None}
    assert parse_space_spec(nulls) == spec
    assert parse_space_spec({**small, "quotas": {"messages_per_s": None}}) == spec


def test_the_same_space_in_other_words_has_one_canonical_form():
    a = parse_space_spec(ORDERS)
    b = parse_space_spec({**ORDERS, "attributes": [*ORDERS["attributes"][:1],
                                                   {"name": "amount", "type": "number", "min": 0.0, "max": 10000.0},
                                                   *ORDERS["attributes"][2:]],
                          "quotas": {"bytes_per_s": 1000000, "messages_per_s": 500.0, "subscriptions": 1000}})
    assert a.canonical() == b.canonical() and first_difference(a, b) is None
    plain = {"name": "p", "attributes": [{"name": "x", "min": 0, "max": 1}, {"name": "y", "min": 0, "max": 1}]}
    assert parse_space_spec(plain).canonical() == parse_space_spec({**plain, "partition": ["x", "y"]}).canonical()


@pytest.mark.parametrize("change, field", [
    ({"attributes": [*ORDERS["attributes"][:1], {"name": "amount", "min": 0, "max": 99}, *ORDERS["attributes"][2:]]},
     "attributes[1]"),
    ({"attributes": ORDERS["attributes"][:3]}, "attributes[3]"),
    ({"attributes": [*ORDERS["attributes"][1::-1], *ORDERS["attributes"][2:]]}, "attributes[0]"),  # the order
    ({"partition": ["amount", "status"]}, "partition[0]"),
    ({"partition": ["status"]}, "partition[1]"),
    ({"matchers": None}, "matchers"),
    ({"retention_s": 0}, "retention_s"),
    ({"quotas": {**ORDERS["quotas"], "messages_per_s": 501}}, "quotas.messages_per_s"),
    ({"quotas": {"subscriptions": 1000, "messages_per_s": 500}}, "quotas.bytes_per_s"),
    ({"name": "orders-2"}, "name"),
])
def test_any_other_difference_is_another_space_named_by_its_first_field(change, field):
    a, b = parse_space_spec(ORDERS), parse_space_spec({**ORDERS, **change})
    assert a.canonical() != b.canonical() and first_difference(a, b) == field
    err = space_conflict("orders", field)
    assert (err.status, err.code, err.field) == (409, "conflict", field)


def test_the_default_space_is_the_clusters_own():
    spec = default_spec(default_space())
    assert spec.name == DEFAULT_SPACE == "default" and spec.space == default_space()
    assert SpaceSpec.from_json(spec.to_json()) == spec


def test_the_space_file_loader_still_names_the_key_in_its_message(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("attributes:\n- {name: s, type: text}\npartition: [s]\n")
    with pytest.raises(SpaceError, match=r"^attributes\[0\]\.type: expected one of") as info:
        load_space(path)
    assert info.value.field == "attributes[0].type"
    with pytest.raises(SpaceError, match=r"^dimensions\[0\]\.name") as old:
        Space.from_json({"dimensions": [{"name": "1", "min": 0, "max": 1}]})
    assert old.value.field is None  # the numbers-only form names it in the message only


names = st.from_regex(r"[a-z0-9-]{1,63}", fullmatch=True)
bounds = st.tuples(st.integers(-10 ** 6, 10 ** 6), st.integers(1, 10 ** 6)).map(lambda t: (t[0], t[0] + t[1]))
attribute = st.one_of(
    st.builds(lambda b, o: {"type": "number", "min": b[0], "max": b[1], "optional": o}, bounds, st.booleans()),
    st.builds(lambda t, o: {"type": t, "optional": o}, st.sampled_from(["string", "boolean"]), st.booleans()))


@st.composite
def bodies(draw):
    attrs = [{"name": f"a{i}", **a} for i, a in enumerate(draw(st.lists(attribute, min_size=1, max_size=6)))]
    partition = draw(st.lists(st.sampled_from([a["name"] for a in attrs]), min_size=1, unique=True))
    quotas = draw(st.fixed_dictionaries({}, optional={
        "subscriptions": st.integers(1, 10 ** 9),
        "messages_per_s": st.floats(0.001, 1e9) | st.integers(1, 10 ** 9),
        "bytes_per_s": st.floats(0.001, 1e12)}))
    return {"name": draw(names), "attributes": attrs, "partition": partition, "quotas": quotas,
            "matchers": draw(st.none() | st.integers(1, 1000)), "retention_s": draw(st.integers(0, 86_400))}


@settings(max_examples=200, deadline=None)
@given(bodies())
def test_every_valid_body_round_trips_through_json_and_its_canonical_form(body):
    spec = parse_space_spec(body)
    again = parse_space_spec(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.canonical() == spec.canonical() and first_difference(spec, again) is None
    assert parse_space_spec(json.loads(json.dumps(body))).canonical() == spec.canonical()


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={k: json_values for k in
                                          ("name", "attributes", "partition", "matchers", "retention_s", "quotas")}))
def test_any_json_body_is_a_spec_or_a_422_naming_a_field(body):
    try:
        parse_space_spec(body)
    except ApiError as err:
        assert err.status == 422 and err.code == "invalid_space" and err.field


@pytest.mark.parametrize(("text", "message"), [
    ("- {name: orders, attributes: [{name: a, type: colour}]}", "spaces[0].attributes[0].type:"),
    ("spaces: [{name: a-1, attributes: [{name: a, min: 0, max: 1}]}, {name: Orders}]", "spaces[1].name must be"),
    ("- {name: default, attributes: [{name: a, min: 0, max: 1}]}", "'default' is the cluster's own space"),
    ("- {name: a, attributes: [{name: x, min: 0, max: 1}]}\n- {name: a, attributes: [{name: y, min: 0, max: 1}]}",
     "spaces[1].name: 'a' is declared twice"),
    ("- {name: a, attributes: [{name: s, type: string}]}", "spaces[0].partition: required"),
    ("{name: orders}", "expected a list of space definitions"),
    ("[unclosed", "spaces.yaml:"),
])
def test_a_spaces_file_names_the_entry_and_field_at_fault(tmp_path, text, message):
    path = tmp_path / "spaces.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_spaces_file(str(path))
    assert message in str(info.value) and str(path) in str(info.value)


def test_a_spaces_file_in_yaml_or_json_gives_the_specs_of_its_bodies(tmp_path):
    bodies = [{"name": "orders", "attributes": [{"name": "status", "type": "string"}], "partition": ["status"]},
              {"name": "traffic", "attributes": [{"name": "speed", "type": "number", "min": 0, "max": 200}]}]
    (tmp_path / "a.json").write_text(json.dumps(bodies))
    (tmp_path / "b.yaml").write_text(f"spaces: {json.dumps(bodies)}")
    want = [parse_space_spec(b) for b in bodies]
    assert load_spaces_file(str(tmp_path / "a.json")) == want == load_spaces_file(str(tmp_path / "b.yaml"))
    assert load_spaces_file(str(tmp_path / "a.json"))[1].space.names == ("speed",)
