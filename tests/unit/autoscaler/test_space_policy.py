"""bluedove/autoscaler/space_policy.py: which named spaces get more matchers, and how many."""

from __future__ import annotations

from bluedove.autoscaler.policy import ScalingConfig
from bluedove.autoscaler.space_policy import SpaceLoad, SpacesSample, spaces_to_grow, spaces_to_shrink

C = ScalingConfig(window_s=10.0, out_busy=0.8, target_busy=0.6, max_step=4, out_cooldown_s=15.0, in_window_s=10.0,
                  in_busy=0.25, in_cooldown_s=30.0)


def samples(*loads: dict[str, SpaceLoad], every: float = 1.0, end: float = 100.0) -> list[SpacesSample]:
    """One sample per second ending at `end`, each the given loads, repeated to cover 12 s."""
    n = 13
    return [SpacesSample(end - every * (n - 1 - i), loads[min(i, len(loads) - 1)] if len(loads) > 1 else loads[0])
            for i in range(n)]


def hot(busy: float, matchers: int = 2, fixed: bool = False) -> SpaceLoad:
    return SpaceLoad(busy, 10, matchers, fixed)


def test_a_space_busy_over_the_threshold_per_owner_for_the_whole_window_grows_to_its_target():
    (g,) = spaces_to_grow(samples({"orders": hot(2.4)}), cluster=8, now=100.0, grown_at={}, c=C)
    # 1.2 per owner over 0.8: 2.4 matchers' worth at 0.6 each wants 4
    assert (g.space, g.to) == ("orders", 4) and "above 0.8" in g.reason


def test_at_least_one_more_at_most_max_step_more_and_never_past_the_cluster():
    assert spaces_to_grow(samples({"s": hot(1.7)}), 8, 100.0, {}, C)[0].to == 3  # wants 3: one more
    assert spaces_to_grow(samples({"s": hot(20.0)}), 30, 100.0, {}, C)[0].to == 6  # 2 + max_step 4
    assert spaces_to_grow(samples({"s": hot(20.0)}), 3, 100.0, {}, C)[0].to == 3  # the cluster's 3


def test_no_growth_for_a_burst_shorter_than_the_window_a_fixed_size_a_full_span_or_in_the_cooldown():
    burst = samples(*([{"s": hot(0.4)}] * 5 + [{"s": hot(3.0)}]))  # hot only for the last 8 s
    assert spaces_to_grow(burst, 8, 100.0, {}, C) == []
    assert spaces_to_grow(samples({"s": hot(3.0, fixed=True)}), 8, 100.0, {}, C) == []  # `matchers` said
    assert spaces_to_grow(samples({"s": hot(3.0, matchers=8)}), 8, 100.0, {}, C) == []  # spans them all
    assert spaces_to_grow(samples({"s": hot(3.0)}), 8, 100.0, {"s": 90.0}, C) == []  # grew 10 s ago
    assert len(spaces_to_grow(samples({"s": hot(3.0)}), 8, 100.0, {"s": 80.0}, C)) == 1  # 20 s ago


def test_a_space_missing_from_a_sample_was_idle_then_and_a_short_history_decides_nothing():
    gap = samples({"s": hot(3.0)})
    gap[5] = SpacesSample(gap[5].at, {})  # no matcher reported work of it then
    assert spaces_to_grow(gap, 8, 100.0, {}, C) == []
    assert spaces_to_grow(samples({"s": hot(3.0)})[-2:], 8, 100.0, {}, C) == []
    # only the hot one of two spaces grows
    two = samples({"hot": hot(3.0), "calm": hot(0.5)})
    assert [g.space for g in spaces_to_grow(two, 8, 100.0, {}, C)] == ["hot"]


def grown(busy: float, matchers: int = 4, spans: int = 4, base: int = 2, queued: int = 0) -> SpaceLoad:
    return SpaceLoad(busy, queued, matchers, False, spans, base)


def test_a_grown_space_gone_idle_shrinks_one_matcher_at_a_time_towards_what_it_spanned():
    (r,) = spaces_to_shrink(samples({"s": grown(0.2)}), now=100.0, changed_at={}, c=C)
    assert (r.space, r.to) == ("s", 3) and "idle" in r.reason
    assert spaces_to_shrink(samples({"s": grown(0.2, matchers=3, spans=3)}), 100.0, {}, C)[0].to == 2


def test_no_shrink_below_its_base_while_busy_queued_changing_too_soon_or_never_grown():
    assert spaces_to_shrink(samples({"s": grown(0.1, 2, 2, 2)}), 100.0, {}, C) == []  # at its base
    assert spaces_to_shrink(samples({"s": grown(0.1, 3, 3, 0)}), 100.0, {}, C) == []  # never grown
    assert spaces_to_shrink(samples({"s": grown(1.2)}), 100.0, {}, C) == []  # 0.3 per owner: not idle
    assert spaces_to_shrink(samples({"s": grown(0.1, queued=5)}), 100.0, {}, C) == []
    assert spaces_to_shrink(samples({"s": grown(0.1, matchers=3, spans=4)}), 100.0, {}, C) == []  # growing
    assert spaces_to_shrink(samples({"s": grown(0.1)}), 100.0, {"s": 80.0}, C) == []  # changed 20 s ago
    # under a higher in_busy, idle enough per owner (0.475) but one matcher fewer would be over the
    # target (1.9 over 3 = 0.63): kept
    loose = ScalingConfig(**{**C.__dict__, "in_busy": 0.5})
    assert [r.space for r in spaces_to_shrink(samples({"s": grown(1.9), "t": grown(1.6)}), 100.0, {}, loose)] == ["t"]
    gap = samples({"s": grown(0.1)})
    gap[4] = SpacesSample(gap[4].at, {})
    assert spaces_to_shrink(gap, 100.0, {}, C) == []  # not reported at every sample


def test_a_space_growing_already_is_not_grown_again():
    assert spaces_to_grow(samples({"s": SpaceLoad(3.0, 0, 2, False, 3, 2)}), 8, 100.0, {}, C) == []
