"""Which named spaces' catalogue logs a round reads (bluedove/matcher/named_tails.py): every
space with a recent direct subscription call, each round; the idle ones a slice per round, so
that each is read once every `idle_every_s`, none skipped."""

from bluedove.matcher.named_tails import ACTIVE_S, NamedTails


def tails() -> NamedTails:
    return NamedTails(None, dict, every_s=0.5, idle_every_s=5.0, linger_s=0.0, retry_s=1.0)  # type: ignore[arg-type]


def test_idle_spaces_are_read_a_slice_a_round_each_once_per_idle_period():
    t = tails()
    names = [f"s{i:03}" for i in range(95)]
    rounds = [t.due(names, 0.0) for _ in range(10)]  # 10 rounds of 0.5 s: one idle period
    assert all(len(r) == 10 for r in rounds)  # 95 / 10 rounds, rounded up
    seen = [n for r in rounds for n in r]
    assert set(seen) == set(names)


def test_a_space_touched_is_read_every_round_until_it_is_quiet_again():
    t = tails()
    names = [f"s{i:03}" for i in range(100)]
    t.touch("s050", 1.0)
    for now in (1.0, 1.5, 2.0, 1.0 + ACTIVE_S - 0.1):
        assert "s050" in t.due(names, now)
    later = [t.due(names, 1.0 + ACTIVE_S + 0.5 * i) for i in range(10)]
    assert sum(r.count("s050") for r in later) == 1  # idle again: once per idle period


def test_with_no_idle_space_only_the_active_ones_are_read():
    t = tails()
    t.touch("a", 0.0)
    assert t.due(["a"], 0.1) == ["a"]
    assert t.due([], 0.1) == []
