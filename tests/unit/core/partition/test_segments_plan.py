"""Where a joining matcher cuts: the hottest owner per dimension, at its load median."""

import math

from bluedove.core.load import LoadReport
from bluedove.core.partition.segments import equal_partition, hottest, plan_split, split
from bluedove.core.space import default_space


def table4():
    return equal_partition(default_space(), {f"m{i}": f"a{i}" for i in range(1, 5)})


def loads(busy: dict[str, float], split_at: dict[str, float] | None = None, subs=None):
    out = {}
    for m in ("m1", "m2", "m3", "m4"):
        out[m] = [LoadReport(lam=busy.get(m, 0.0) * 1000, mu=1000.0, subs=(subs or {}).get(m, 100),
                          split_at=(split_at or {}).get(m, math.nan)) for _ in range(4)]
    return out


def test_the_busiest_owner_is_split_not_the_biggest():
    t = table4()
    ld = loads({"m1": 0.2, "m3": 0.9}, subs={"m1": 9000, "m3": 10})
    assert hottest(t, 0, ld) == "m3"


def test_without_traffic_the_biggest_set_is_split():
    t = table4()
    assert hottest(t, 2, loads({}, subs={"m2": 500})) == "m2"


def test_the_cut_is_where_the_load_halves_else_the_midpoint():
    t = table4()
    at, why = plan_split(t, loads({"m3": 0.9}, split_at={"m3": 530.0}))
    assert at == {i: ("m3", 530.0) for i in range(4)}
    assert "load median" in why
    at, why = plan_split(t, loads({"m3": 0.9}))  # too few messages seen: NaN
    assert at == {i: ("m3", 625.0) for i in range(4)} and "midpoint" in why
    at, _ = plan_split(t, loads({"m3": 0.9}, split_at={"m3": 900.0}))  # outside its range
    assert at[0] == ("m3", 625.0)
    assert split(t, "m5", "a5", at).segments_of("m5")[0] == (625.0, 750.0)


def test_a_queue_without_service_counts_as_busy():
    assert LoadReport(q=5).busy == 1.0 and LoadReport().busy == 0.0


def test_without_a_live_median_the_seed_histogram_says_where_the_load_halves():
    """Order of preference for a cut: the owner's live load median, else the seed's histogram
    inside the owner's range, else the midpoint; the reason names which."""
    from bluedove.core.partition.seeds import parse_seed

    t = table4()
    space = default_space()
    seed = parse_seed({"version": 1, "matchers": 4, "dimensions": {
        d.name: {"boundaries": [0, 250, 500, 750, 1000],
                 # x0: all of m3's [500, 750) load in [700, 750); x1..x3: no histogram
                 **({"histogram": {"edges": [0, 500, 700, 750, 1000], "load": [5, 0, 4, 9]}} if d.name == "x0"
                    else {})} for d in space.dimensions},
        "placement": [{"matcher": j, "segments": {d.name: j for d in space.dimensions}} for j in range(4)]},
        space, None)
    at, why = plan_split(t, loads({"m3": 0.9}), seed)
    assert at[0] == ("m3", 725.0) and "x0: m3 (busy 0.90) at 725 (seed histogram)" in why
    assert at[1] == ("m3", 625.0) and "x1: m3 (busy 0.90) at 625 (midpoint)" in why
    # A live median wins over the seed.
    at, why = plan_split(t, loads({"m3": 0.9}, split_at={"m3": 530.0}), seed)
    assert at[0] == ("m3", 530.0) and "(load median)" in why and "seed histogram" not in why
    # A seed with no load in the range: the midpoint.
    at, _ = plan_split(t, loads({"m1": 0.9}), parse_seed({"cuts": [[250, 500, 750]] * 4}, space, 4))
    assert at[0] == ("m1", 125.0)
