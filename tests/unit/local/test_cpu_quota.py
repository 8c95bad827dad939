"""The CPU quota's pure parts (names, values, the flag's checks) and its file I/O on a fake cgroup
tree in a temporary folder (the kernel's own behaviour: tests/integration/test_matcher_cpu.py; the
parsing of what is read: tests/unit/runtime/test_cpu_limit.py)."""

from __future__ import annotations

import argparse
import os

import pytest

from bluedove.local.cpu_quota import (
    Controller,
    CpuQuota,
    CpuQuotaError,
    add_cpu_flag,
    controller_of,
    cores_problem,
    cpu_flag_problem,
    detect,
    group_name,
    parse_pids,
    quota_files,
    quota_us,
    stale_owners,
)


@pytest.mark.parametrize(("cores", "quota"), [(0.2, 20_000), (1, 100_000), (1.5, 150_000), (0.0001, 1_000)])
def test_the_quota_is_cores_times_the_period_and_at_least_a_millisecond(cores, quota):
    assert quota_us(cores) == quota


@pytest.mark.parametrize("cores", [0, -1, float("nan")])
def test_no_quota_for_no_cores(cores):
    with pytest.raises(ValueError, match="cores"):
        quota_us(cores)


def test_the_files_written_per_version():
    assert quota_files(2, 0.2) == {"cpu.max": "20000 100000"}
    assert list(quota_files(1, 0.2).items()) == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "20000")]


def test_group_names_carry_the_supervisor_and_a_safe_process_name():
    assert group_name(4242, "m1") == "bluedove-4242-m1"
    assert group_name(1, "a/b c") == "bluedove-1-a_b_c"
    assert parse_pids("12\n34\n") == [12, 34] and parse_pids("") == []


def test_stale_groups_are_those_of_supervisors_gone():
    names = ["bluedove-10-m1", "bluedove-11-m1", "bluedove-x-m1", "other", "bluedove-10-d1"]
    assert stale_owners(names, alive={11}) == ["bluedove-10-m1", "bluedove-10-d1"]


def test_the_controller_is_v2_when_listed_else_v1_when_mounted(tmp_path):
    assert controller_of(tmp_path, "cpuset cpu io memory\n", False) == Controller(2, tmp_path)
    assert controller_of(tmp_path, "cpuset io memory\n", True) == Controller(1, tmp_path / "cpu")
    assert controller_of(tmp_path, "cpuset io\n", False) is None
    assert controller_of(tmp_path, None, False) is None


def test_detect_reads_the_tree_and_names_the_path_when_missing(tmp_path):
    with pytest.raises(CpuQuotaError, match=f"{tmp_path}: the cpu cgroup controller is not mounted"):
        detect(tmp_path)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert detect(tmp_path) == Controller(1, tmp_path / "cpu")
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert detect(tmp_path) == Controller(2, tmp_path)


@pytest.mark.parametrize(("cores", "problem"), [
    (None, None), (0.5, None), (2, None),
    (0, "--matcher-cpu 0: expected a number of cores above 0"),
    (-1, "--matcher-cpu -1: expected a number of cores above 0"),
    (3, "--matcher-cpu 3: this machine has 2 cores"),
])
def test_the_flag_is_above_zero_and_at_most_the_machines_cores(cores, problem):
    assert cores_problem("--matcher-cpu", cores, 2) == problem


def test_the_flag_parses_and_is_checked_against_this_machine():
    p = argparse.ArgumentParser()
    add_cpu_flag(p)
    add_cpu_flag(p, "dispatcher")
    args = p.parse_args(["--matcher-cpu", "0.25"])
    assert (args.matcher_cpu, args.dispatcher_cpu) == (0.25, None)
    assert cpu_flag_problem(args) is None and cpu_flag_problem(args, "dispatcher") is None
    too_many = p.parse_args(["--dispatcher-cpu", str((os.cpu_count() or 1) + 1)])
    assert "this machine has" in (cpu_flag_problem(too_many, "dispatcher") or "")


def _fake_v1(tmp_path):
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    return cpu


def test_a_cap_makes_the_group_with_its_quota_and_moves_the_pid(tmp_path):
    cpu = _fake_v1(tmp_path)
    quota = CpuQuota(0.2, root=tmp_path, owner_pid=77)
    path = quota.cap(1234, "m1")
    assert path == cpu / "bluedove-77-m1"
    assert quota.limit("m1") == (20_000, 100_000) and quota.pids("m1") == [1234]
    assert quota.cap(1235, "m1") == path  # a restart goes back into the same group
    (path / "cpu.stat").write_text("nr_periods 18\nnr_throttled 16\nthrottled_time 1154838353\n")
    assert quota.throttling("m1").throttled == 16


def test_v2_enables_the_cpu_controller_for_the_groups(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    quota = CpuQuota(1.5, root=tmp_path, owner_pid=77)
    path = quota.cap(1234, "d1")
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (path / "cpu.max").read_text() == "150000 100000" and quota.limit("d1") == (150_000, 100_000)


def test_groups_left_by_a_supervisor_gone_are_swept_at_the_first_cap(tmp_path):
    cpu = _fake_v1(tmp_path)
    gone, mine = cpu / f"bluedove-{2**30}-m1", cpu / f"bluedove-{os.getpid()}-m2"
    gone.mkdir()
    mine.mkdir()
    CpuQuota(0.5, root=tmp_path).cap(1234, "m3")
    assert not gone.exists() and mine.exists()


def test_a_group_that_cannot_be_made_is_a_clear_error(tmp_path):
    cpu = _fake_v1(tmp_path)
    (cpu / "bluedove-77-m1").write_text("")  # in the way of the group
    with pytest.raises(CpuQuotaError, match=f"{cpu / 'bluedove-77-m1'}: the cpu cgroup controller is not writable"):
        CpuQuota(0.5, root=tmp_path, owner_pid=77).cap(1234, "m1")


def test_nothing_is_touched_before_the_first_cap(tmp_path):
    quota = CpuQuota(0.5, root=tmp_path / "absent")
    quota.release_all()  # nothing made, nothing to remove
    with pytest.raises(CpuQuotaError, match="not mounted"):
        quota.cap(1234, "m1")
    with pytest.raises(ValueError, match="cores"):
        CpuQuota(0)
