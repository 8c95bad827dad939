"""A process's CPU limit as its cgroup sets it (a Kubernetes pod's CPU limit, or a local cluster's
quota, bluedove/local/cpu_quota.py), and its use of that limit over a window.

Where: /proc/self/cgroup names the process's group in each hierarchy ("4:cpu,cpuacct:/kubepods/…"
on cgroup v1, "0::/…" on v2) and /proc/self/mountinfo where each hierarchy is mounted; the
group's directory is the mount point plus the group's path below the mount's root. The limit
is the tightest quota on the path from that group up to the mount point (a pod's limit may
sit on a parent group): `cpu.max` ("QUOTA PERIOD", v2) or `cpu.cfs_quota_us` and
`cpu.cfs_period_us` (v1). That group's `cpu.stat` counts the CFS periods in which it had work
(`nr_periods`) and those in which it used up its quota and was held back (`nr_throttled`).

The parsing and the arithmetic over readings are pure (time is an argument); `read_limit` and
`CpuWatch` do the few small reads.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PROC_SELF = Path("/proc/self")
# The files holding a group's quota and period, by cgroup version.
LIMIT_FILES = {1: ("cpu.cfs_quota_us", "cpu.cfs_period_us"), 2: ("cpu.max",)}


@dataclass(frozen=True)
class Throttling:
    """A group's throttling from its cpu.stat: periods it ran in, periods it was throttled in, time held back."""

    periods: int
    throttled: int
    throttled_s: float


@dataclass(frozen=True)
class Group:
    """Where a process's cpu cgroup is: the hierarchy's version (1 or 2), its mount point, the group's directory."""

    version: int
    mount: Path
    path: Path

    def lineage(self) -> list[Path]:
        """The group and its parents up to the mount point, innermost first."""
        out = [self.path]
        while out[-1] != self.mount and self.mount in out[-1].parents:
            out.append(out[-1].parent)
        return out


@dataclass(frozen=True)
class Limit:
    """The tightest CPU limit on a process's path: in cores, the group that sets it, and that group's throttling."""

    cores: float
    group: Path
    stat: Throttling


@dataclass(frozen=True)
class Reading:
    """One reading: when (monotonic s), the process's CPU seconds so far, and its limit (None: none known)."""

    at: float
    cpu_s: float
    limit: Limit | None


@dataclass(frozen=True)
class CpuUse:
    """A process's CPU over a window against its limit: the limit (cores), the CPU it used as a
    fraction of that limit, and the share of its periods with work in which it was throttled."""

    cores: float
    used: float
    throttled: float


NONE_KNOWN = CpuUse(0.0, 0.0, 0.0)  # no limit known (or not yet two readings of it): zeros, as a report says


# -- pure ------------------------------------------------------------------------------------
def parse_limit(version: int, files: dict[str, str]) -> tuple[int | None, int]:
    """(quota µs, or None for none; period µs) from a group's files (as LIMIT_FILES names them)."""
    if version == 2:
        quota, period = files["cpu.max"].split()
        return (None if quota == "max" else int(quota)), int(period)
    quota_v1 = int(files["cpu.cfs_quota_us"])
    return (None if quota_v1 < 0 else quota_v1), int(files["cpu.cfs_period_us"])


def parse_stat(text: str) -> Throttling:
    """A cpu.stat's throttling (v1 counts throttled time in ns, v2 in µs)."""
    values = {k: int(v) for k, v in (line.split() for line in text.splitlines() if len(line.split()) == 2)}
    held = values["throttled_usec"] / 1e6 if "throttled_usec" in values else values.get("throttled_time", 0) / 1e9
    return Throttling(values.get("nr_periods", 0), values.get("nr_throttled", 0), held)


def locate(cgroup: str, mountinfo: str) -> Group | None:
    """The process's cpu group from /proc/self/cgroup and /proc/self/mountinfo: the v1 hierarchy
    holding the cpu controller if there is one, else the v2 hierarchy; None if neither is mounted."""
    paths: dict[int, str] = {}
    for line in cgroup.splitlines():
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and not controllers:
            paths.setdefault(2, path)
        elif "cpu" in controllers.split(","):
            paths[1] = path
    mounts: dict[int, tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        fs = fields[fields.index("-") + 1:]
        if fs[:1] == ["cgroup"] and len(fs) >= 3 and "cpu" in fs[2].split(","):
            mounts[1] = (fields[3], fields[4])
        elif fs[:1] == ["cgroup2"]:
            mounts.setdefault(2, (fields[3], fields[4]))
    for version in (1, 2):
        if version in paths and version in mounts:
            root, point = mounts[version]
            group = PurePosixPath(paths[version])
            below = group.relative_to(root) if group.is_relative_to(root) else PurePosixPath(".")
            return Group(version, Path(point), Path(point) / below)
    return None


def tightest(limits: list[tuple[Path, int | None, int]]) -> tuple[Path, float] | None:
    """Of (group, quota µs or None, period µs) along a path, the group with the fewest cores and
    that number; None if no group sets a quota."""
    cores = [(quota / period, group) for group, quota, period in limits if quota is not None and period > 0]
    if not cores:
        return None
    value, group = min(cores, key=lambda c: c[0])
    return group, value


def use(first: Reading, last: Reading) -> CpuUse | None:
    """The process's use of its limit between two readings; None without a limit, or when the
    two read different groups (the process was moved: their counters do not compare)."""
    a, b = first.limit, last.limit
    if a is None or b is None or a.group != b.group or last.at <= first.at:
        return None
    periods = b.stat.periods - a.stat.periods
    throttled = b.stat.throttled - a.stat.throttled
    used = (last.cpu_s - first.cpu_s) / (last.at - first.at) / b.cores
    return CpuUse(b.cores, used, throttled / periods if periods > 0 else 0.0)


class CpuWindow:
    """Readings over the last `window_s`, taken at most every `every_s`: the use of the limit over them."""

    def __init__(self, window_s: float, every_s: float = 0.5) -> None:
        self.window_s = window_s
        self.every_s = every_s
        self._readings: deque[Reading] = deque()

    def due(self, now: float) -> bool:
        return not self._readings or now - self._readings[-1].at >= self.every_s

    def add(self, r: Reading) -> None:
        if self._readings and _group(self._readings[-1]) != _group(r):
            self._readings.clear()  # another group (or none): the counters start again
        self._readings.append(r)
        while len(self._readings) > 2 and self._readings[1].at <= r.at - self.window_s:
            self._readings.popleft()

    @property
    def latest(self) -> Reading | None:
        return self._readings[-1] if self._readings else None

    def use(self) -> CpuUse | None:
        return use(self._readings[0], self._readings[-1]) if len(self._readings) >= 2 else None


def _group(r: Reading) -> Path | None:
    return r.limit.group if r.limit is not None else None


# -- I/O -------------------------------------------------------------------------------------
def read_limit(proc: Path = PROC_SELF) -> Limit | None:
    """The tightest CPU limit on this process's cgroup path now, or None (none set, no cgroup
    file system, or not Linux)."""
    try:
        group = locate((proc / "cgroup").read_text(), (proc / "mountinfo").read_text())
    except OSError:
        return None
    if group is None:
        return None
    found: list[tuple[Path, int | None, int]] = []
    for d in group.lineage():
        try:
            found.append((d, *parse_limit(group.version, {f: (d / f).read_text() for f in LIMIT_FILES[group.version]})))
        except (OSError, ValueError):
            continue  # the root group of v2 has no cpu.max: no limit there
    best = tightest(found)
    if best is None:
        return None
    try:
        stat = parse_stat((best[0] / "cpu.stat").read_text())
    except (OSError, ValueError):
        stat = Throttling(0, 0, 0.0)
    return Limit(best[1], best[0], stat)


class CpuWatch:
    """This process's CPU against its cgroup's limit over the last `window_s`: a reading is taken
    when asked, at most every `every_s` (a process may be moved into its group after it starts)."""

    def __init__(self, window_s: float, every_s: float = 0.5, proc: Path = PROC_SELF) -> None:
        self.window = CpuWindow(window_s, every_s)
        self.proc = proc

    def read(self, now: float) -> CpuUse:
        """The use of the limit over the window ending now (NONE_KNOWN without a limit)."""
        if self.window.due(now):
            self.window.add(Reading(now, time.process_time(), read_limit(self.proc)))
        return self.window.use() or NONE_KNOWN

    def capacity(self, most: float = 1.0) -> float:
        """The cores this process may use: its limit at the last reading (a new one taken if
        due), at most `most`; `most` where no limit is known."""
        self.read(time.monotonic())
        latest = self.window.latest
        return most if latest is None or latest.limit is None else min(latest.limit.cores, most)
