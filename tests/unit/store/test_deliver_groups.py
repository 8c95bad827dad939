"""A matched batch's deliveries cut into DELIVER calls (bluedove/store/batch.py `group_deliveries`):
by slot, at most `most` deliveries a call, each call carrying the messages its deliveries name,
and the messages in `skip` left out."""

from __future__ import annotations

from bluedove.store.batch import group_deliveries


def test_a_slots_deliveries_are_cut_into_calls_of_at_most_most_each():
    deliveries = [(f"q{j}", i, f"[s{i}.{j}]") for i in range(3) for j in range(4)]  # 3 messages x 4 queues
    groups = group_deliveries(deliveries, ["m0", "m1", "m2"], set(), lambda q: 0, most=5)
    assert [len(g.pairs) // 2 for g in groups] == [5, 5, 2]
    seen = []
    for g in groups:
        assert len(g.keys) == 3 * (len(g.pairs) // 2)  # stream, mark, hash per delivery
        for li, subs in zip(g.pairs[::2], g.pairs[1::2]):
            idx = g.messages[li - 1]  # each delivery names a message of its own call
            seen.append((idx, subs))
    assert sorted(seen) == sorted((i, s) for _, i, s in deliveries)


def test_slots_never_share_a_call_and_skipped_messages_are_left_out():
    deliveries = [("a", 0, "x"), ("b", 0, "y"), ("a", 1, "z"), ("b", 2, "w")]
    groups = group_deliveries(deliveries, ["m0", "m1", "m2"], {1}, lambda q: {"a": 1, "b": 2}[q], most=1)
    assert len(groups) == 3  # a's one delivery left (m1 skipped), b's two in calls of one
    assert all(len(g.pairs) == 2 for g in groups)
    assert sorted(g.messages[0] for g in groups) == [0, 0, 2]
