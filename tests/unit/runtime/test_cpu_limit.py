"""bluedove/runtime/cpu_limit.py: a process's own cgroup and CPU limit, found from /proc/self's
files, and its use of the limit over a window (pure, time an argument); the reads on a fake
/proc and cgroup tree in a temporary folder (the kernel's own behaviour: tests/integration/test_matcher_cpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bluedove.runtime.cpu_limit import (
    NONE_KNOWN,
    CpuUse,
    CpuWatch,
    CpuWindow,
    Group,
    Limit,
    Reading,
    Throttling,
    locate,
    parse_limit,
    parse_stat,
    read_limit,
    tightest,
    use,
)

V1_STAT = "nr_periods 18\nnr_throttled 16\nthrottled_time 1154838353\nnr_bursts 0\nburst_time 0\n"
V2_STAT = ("usage_usec 391000\nuser_usec 380000\nsystem_usec 11000\nnr_periods 18\nnr_throttled 16\n"
           "throttled_usec 1154838\nnr_bursts 0\nburst_usec 0\n")

# A host with cgroup v1 (the cpu controller alone, and cpuacct apart) and an empty v2 hierarchy beside.
V1_CGROUP = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/\n1:cpu:/bluedove-77-m1\n0::/\n"
V1_MOUNTS = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
             "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
             "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
             "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
# A Kubernetes pod on cgroup v2 without a cgroup namespace: the mount's root is the pod's group.
V2_CGROUP = "0::/kubepods/burstable/pod1/c1\n"
V2_MOUNTS = "29 23 0:26 /kubepods/burstable/pod1/c1 /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n"


def test_limits_read_back():
    assert parse_limit(2, {"cpu.max": "20000 100000\n"}) == (20_000, 100_000)
    assert parse_limit(2, {"cpu.max": "max 100000\n"}) == (None, 100_000)
    assert parse_limit(1, {"cpu.cfs_quota_us": "20000\n", "cpu.cfs_period_us": "100000\n"}) == (20_000, 100_000)
    assert parse_limit(1, {"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"}) == (None, 100_000)


def test_throttling_in_seconds_from_either_version():
    assert parse_stat(V1_STAT) == Throttling(periods=18, throttled=16, throttled_s=pytest.approx(1.154838353))
    assert parse_stat(V2_STAT) == Throttling(periods=18, throttled=16, throttled_s=pytest.approx(1.154838))
    assert parse_stat("") == Throttling(0, 0, 0.0)
    assert parse_stat(V2_STAT).periods == 18  # nr_periods: the periods it had work in


def test_the_group_is_v1_s_cpu_hierarchy_when_it_holds_the_controller():
    g = locate(V1_CGROUP, V1_MOUNTS)
    assert g == Group(1, Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu/bluedove-77-m1"))
    assert g.lineage() == [Path("/sys/fs/cgroup/cpu/bluedove-77-m1"), Path("/sys/fs/cgroup/cpu")]
    both = "1:cpu,cpuacct:/a/b\n"
    mounts = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    assert locate(both, mounts) == Group(1, Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct/a/b"))


def test_the_group_is_below_the_mount_s_root_on_v2():
    g = locate(V2_CGROUP, V2_MOUNTS)
    assert g == Group(2, Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup"))
    assert g.lineage() == [Path("/sys/fs/cgroup")]
    # with a cgroup namespace the path is relative to the mount's root "/"
    g = locate("0::/c1\n", "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    assert g is not None and g.lineage() == [Path("/sys/fs/cgroup/c1"), Path("/sys/fs/cgroup")]


def test_no_group_without_a_cgroup_file_system():
    assert locate(V1_CGROUP, "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n") is None
    assert locate("", "") is None


def test_the_tightest_limit_on_the_path_wins():
    a, b, c = Path("/a/b/c"), Path("/a/b"), Path("/a")
    assert tightest([(a, None, 100_000), (b, 50_000, 100_000), (c, 20_000, 100_000)]) == (c, 0.2)
    assert tightest([(a, 150_000, 100_000), (b, None, 100_000)]) == (a, 1.5)
    assert tightest([(a, None, 100_000)]) is None and tightest([]) is None


def _reading(at, cpu_s, periods=0, throttled=0, group="/g", cores=0.2):
    return Reading(at, cpu_s, Limit(cores, Path(group), Throttling(periods, throttled, 0.0)))


def test_use_is_cpu_over_the_limit_and_throttled_periods_over_periods_with_work():
    u = use(_reading(10.0, 1.0, 100, 10), _reading(15.0, 1.95, 150, 45))
    assert u == CpuUse(cores=0.2, used=pytest.approx(0.95), throttled=pytest.approx(0.7))
    assert use(_reading(10.0, 1.0, 100, 10), _reading(15.0, 1.0, 100, 10)).throttled == 0.0  # idle: no periods


def test_no_use_without_a_limit_or_across_groups():
    assert use(Reading(0.0, 0.0, None), Reading(5.0, 1.0, None)) is None
    assert use(_reading(0.0, 0.0), _reading(5.0, 1.0, group="/other")) is None
    assert use(_reading(5.0, 0.0), _reading(5.0, 1.0)) is None


def test_the_window_keeps_its_span_and_starts_again_in_another_group():
    w = CpuWindow(window_s=5.0, every_s=0.5)
    assert w.due(0.0) and w.use() is None
    for k in range(21):  # 10 s at 0.1 core, throttled in half the periods
        w.add(_reading(k * 0.5, k * 0.05, 10 * k, 5 * k))
    assert not w.due(10.2) and w.due(10.5)
    u = w.use()
    assert u is not None and u.used == pytest.approx(0.5) and u.throttled == pytest.approx(0.5)
    assert w._readings[0].at == 5.0  # the window's span, no more
    w.add(_reading(10.5, 0.6, group="/moved"))  # counters of another group do not compare
    assert w.use() is None and len(w._readings) == 1
    w.add(Reading(11.0, 0.7, None))  # nor a reading without a limit
    assert w.use() is None and w.latest == Reading(11.0, 0.7, None)


def _fake_proc(tmp_path, quota: str, parent_quota: str = "-1"):
    cpu = tmp_path / "cpu"
    group = cpu / "pod" / "m1"
    group.mkdir(parents=True)
    for d, q in ((cpu, "-1"), (cpu / "pod", parent_quota), (group, quota)):
        (d / "cpu.cfs_quota_us").write_text(q + "\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
        (d / "cpu.stat").write_text(f"nr_periods {len(str(d))}\nnr_throttled 3\nthrottled_time 0\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("1:cpu:/pod/m1\n0::/\n")
    (proc / "mountinfo").write_text(f"32 31 0:29 / {cpu} rw - cgroup cgroup rw,cpu\n")
    return proc, cpu


def test_the_limit_is_read_from_the_process_s_own_group(tmp_path):
    proc, cpu = _fake_proc(tmp_path, "20000")
    limit = read_limit(proc)
    assert limit == Limit(0.2, cpu / "pod" / "m1", Throttling(len(str(cpu / "pod" / "m1")), 3, 0.0))


def test_a_parent_s_tighter_limit_is_the_limit(tmp_path):
    proc, cpu = _fake_proc(tmp_path, "-1", parent_quota="15000")
    limit = read_limit(proc)
    assert limit is not None and (limit.cores, limit.group) == (0.15, cpu / "pod")


def test_no_limit_when_none_is_set_or_nothing_can_be_read(tmp_path):
    proc, _ = _fake_proc(tmp_path, "-1")
    assert read_limit(proc) is None
    assert read_limit(tmp_path / "absent") is None


def test_the_watch_reads_at_most_every_period_and_reports_the_limit(tmp_path):
    proc, _ = _fake_proc(tmp_path, "50000")
    watch = CpuWatch(window_s=5.0, every_s=0.5, proc=proc)
    assert watch.read(100.0) == NONE_KNOWN  # one reading: no window yet
    assert watch.read(100.1) == NONE_KNOWN and len(watch.window._readings) == 1  # not due: no new reading
    u = watch.read(101.0)
    assert u.cores == 0.5 and u.throttled == 0.0 and u.used >= 0.0


def test_the_capacity_is_the_limit_up_to_a_most(tmp_path):
    proc, _ = _fake_proc(tmp_path, "150000")
    assert CpuWatch(5.0, proc=proc).capacity() == 1.0
    assert CpuWatch(5.0, proc=proc).capacity(most=2.0) == 1.5
    proc, _ = _fake_proc(tmp_path / "low", "20000")
    assert CpuWatch(5.0, proc=proc).capacity() == 0.2
    assert CpuWatch(5.0, proc=tmp_path / "absent").capacity(most=1.0) == 1.0  # none known
