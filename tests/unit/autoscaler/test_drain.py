"""Scale-in drains first (bluedove/autoscaler/drain.py): the order of the pods and the drain of one, with a
fake drainer standing in for the store and the matcher's Leave RPC and a fake clock."""

from __future__ import annotations

import pytest

from bluedove.autoscaler.drain import drain, pods_to_drain, table_owners

STS = "bd-matcher"


def test_pods_go_highest_ordinal_first():
    assert pods_to_drain(STS, 5, 3) == [f"{STS}-4", f"{STS}-3"]
    assert pods_to_drain(STS, 1, 0) == [f"{STS}-0"]
    assert pods_to_drain(STS, 3, 3) == [] and pods_to_drain(STS, 2, 4) == []


def test_owners_are_the_members_and_anyone_owning_a_segment():
    raw = {"members": {"a": "h:1", "b": ""}, "owners": [["a", "b"], ["c", "a"]]}
    assert table_owners(raw) == {"a": "h:1", "b": "", "c": ""}
    assert table_owners(None) == {}


class FakeDrainer:
    """The stored table's owners as a list of answers (the last repeats), and Leave's reply."""

    def __init__(self, tables: list[dict[str, str]], reply: tuple[bool, str] = (True, "")) -> None:
        self.tables = tables
        self.reply = reply
        self.left: list[tuple[str, float]] = []
        self.reads = 0

    def owners(self) -> dict[str, str]:
        self.reads += 1
        return self.tables[min(self.reads - 1, len(self.tables) - 1)]

    def leave(self, address: str, timeout_s: float) -> tuple[bool, str]:
        self.left.append((address, timeout_s))
        return self.reply


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s >= 0
        self.t += s


def run(drainer: FakeDrainer, timeout_s: float = 10.0) -> tuple[bool, str]:
    clock = Clock()
    return drain(drainer, f"{STS}-2", timeout_s, poll_s=0.5, clock=clock, sleep=clock.sleep)


def test_leave_then_wait_until_the_table_lets_it_go():
    pod = f"{STS}-2"
    d = FakeDrainer([{pod: "10.0.0.3:7001", "x": "a"}] * 4 + [{"x": "a"}])
    ok, said = run(d)
    assert ok, said
    assert d.left == [("10.0.0.3:7001", 10.0)]  # its address from the table, the whole timeout for the RPC
    assert d.reads == 5 and said == f"{pod} drained in 1.5 s"


def test_a_refused_leave_keeps_the_pod():
    d = FakeDrainer([{f"{STS}-2": "h:1"}], reply=(False, "no other owner is alive"))
    assert run(d) == (False, f"{STS}-2 did not leave: no other owner is alive")
    assert d.reads == 1  # no waiting once refused


def test_a_member_still_owning_after_the_timeout_keeps_the_pod():
    d = FakeDrainer([{f"{STS}-2": "h:1"}])
    ok, said = run(d, timeout_s=3.0)
    assert not ok and said == f"{STS}-2 still owns segments 3 s after its leave (--drain-timeout 3)"
    assert d.reads == 1 + 7  # polled every 0.5 s until the deadline, no later


def test_a_pod_that_owns_nothing_is_not_asked():
    d = FakeDrainer([{"other": "h:1"}])
    assert run(d) == (True, f"{STS}-2 owns no segments (not drained)")
    assert d.left == []


def test_an_owner_without_an_address_is_not_removed():
    d = FakeDrainer([{f"{STS}-2": ""}])
    ok, said = run(d)
    assert not ok and "no address" in said and d.left == []


@pytest.mark.parametrize("timeout_s", [0.0, 0.2])
def test_a_short_timeout_still_reads_the_table_once_after_the_leave(timeout_s):
    """The leave itself may have emptied the member: a table read after it decides, not the clock."""
    d = FakeDrainer([{f"{STS}-2": "h:1"}, {}])
    assert run(d, timeout_s)[0]


@pytest.mark.parametrize("args, env, named", [
    (["--drain-timeout", "0"], {}, "--drain-timeout"),
    (["--drain-timeout", "-5"], {}, "--drain-timeout"),
    ([], {"BLUEDOVE_DRAIN_TIMEOUT_S": "soon"}, "BLUEDOVE_DRAIN_TIMEOUT_S"),
])
def test_a_bad_drain_timeout_is_a_usage_error_naming_its_source(args, env, named, monkeypatch, capsys):
    """Checked before any Kubernetes configuration is looked for: exit 2, the flag or variable named."""
    from bluedove.cli.main import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as e:
        main(["autoscaler", "--statefulset", STS, "--store", "redis://127.0.0.1:1/0", *args])
    assert e.value.code == 2
    assert f"bluedove autoscaler: {named}: expected a number of seconds above 0" in capsys.readouterr().err
