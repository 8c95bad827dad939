"""CPU quotas for a local cluster's processes, as a Kubernetes pod runs under its CPU limit.

Each capped process gets a cgroup of its own, `bluedove-<supervisor pid>-<process name>`, made
at the root of the cpu controller's hierarchy: with cgroup v2 (one hierarchy at /sys/fs/cgroup)
its `cpu.max` holds "QUOTA PERIOD"; with v1 (the controller at /sys/fs/cgroup/cpu) its
`cpu.cfs_quota_us` and `cpu.cfs_period_us` hold them. The quota is cores × period (period
100,000 µs): 0.5 core runs at most 50 ms in every 100 ms and is throttled for the rest. The
path arithmetic and the values written are pure functions below, the parsing of what is read
is bluedove/runtime/cpu_limit.py's (a process reads its own limit with it); `CpuQuota` does the
file I/O (docs/operations.md, "Matchers as pods on one machine").
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from bluedove.runtime.cpu_limit import Throttling, parse_limit, parse_stat

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel refuses a smaller quota
PREFIX = "bluedove"
_NAME = re.compile(rf"^{PREFIX}-(\d+)-")


class CpuQuotaError(RuntimeError):
    """A CPU quota that cannot be applied: the cpu controller is not mounted, or not writable here."""


@dataclass(frozen=True)
class Controller:
    """Where the cpu controller is: its cgroup version (1 or 2) and the directory groups are made in."""

    version: int
    root: Path


# -- pure ------------------------------------------------------------------------------------
def cores_problem(flag: str, cores: float | None, machine_cores: int | None) -> str | None:
    """What is wrong with a CPU flag's value (a usage error), or None: above 0, at most the machine's cores."""
    if cores is None:
        return None
    if not cores > 0:
        return f"{flag} {cores:g}: expected a number of cores above 0"
    if machine_cores is not None and cores > machine_cores:
        return f"{flag} {cores:g}: this machine has {machine_cores} cores"
    return None


def group_name(owner_pid: int, name: str) -> str:
    """The group of process `name` started by supervisor `owner_pid` (unsafe characters as '_')."""
    return f"{PREFIX}-{owner_pid}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"


def quota_us(cores: float, period_us: int = PERIOD_US) -> int:
    """The CFS quota of `cores` CPUs per period, in µs (at least the kernel's 1 ms)."""
    if not cores > 0:
        raise ValueError(f"cores: expected above 0, got {cores}")
    return max(MIN_QUOTA_US, round(cores * period_us))


def quota_files(version: int, cores: float, period_us: int = PERIOD_US) -> dict[str, str]:
    """The files to write in a new group, in order, and their values."""
    quota = quota_us(cores, period_us)
    if version == 2:
        return {"cpu.max": f"{quota} {period_us}"}
    return {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(quota)}


def parse_pids(text: str) -> list[int]:
    """The pids of a cgroup.procs file."""
    return [int(x) for x in text.split()]


def controller_of(root: Path, controllers: str | None, v1_quota_exists: bool) -> Controller | None:
    """The cpu controller given what /sys/fs/cgroup shows: v2 if its cgroup.controllers lists cpu,
    else v1 if cpu/cpu.cfs_quota_us exists, else None."""
    if controllers is not None and "cpu" in controllers.split():
        return Controller(2, root)
    if v1_quota_exists:
        return Controller(1, root / "cpu")
    return None


def stale_owners(names: list[str], alive: set[int]) -> list[str]:
    """The groups among `names` made by a supervisor no longer running (its pid not in `alive`)."""
    return [n for n in names if (m := _NAME.match(n)) and int(m.group(1)) not in alive]


def add_cpu_flag(p: argparse.ArgumentParser, role: str = "matcher") -> None:
    """`--matcher-cpu CORES` (or --dispatcher-cpu): each such process under a CPU quota."""
    p.add_argument(f"--{role}-cpu", type=float, default=None, metavar="CORES",
                   help=f"cap each {role} process at CORES CPUs (e.g. 0.5), a cgroup of its own with a CFS "
                        "quota as a Kubernetes pod's CPU limit; needs a writable cpu cgroup controller "
                        "(docs/operations.md, \"Matchers as pods on one machine\"; default: no cap)")


def cpu_flag_problem(args: argparse.Namespace, role: str = "matcher") -> str | None:
    """What is wrong with `--matcher-cpu` (or --dispatcher-cpu), or None."""
    return cores_problem(f"--{role}-cpu", getattr(args, f"{role}_cpu", None), os.cpu_count())


# -- I/O -------------------------------------------------------------------------------------
def detect(root: Path = CGROUP_ROOT) -> Controller:
    """The cpu controller under `root`, or CpuQuotaError naming where it was looked for."""
    listed = root / "cgroup.controllers"
    controllers = listed.read_text() if listed.exists() else None
    found = controller_of(root, controllers, (root / "cpu" / "cpu.cfs_quota_us").exists())
    if found is None:
        raise CpuQuotaError(f"{root}: the cpu cgroup controller is not mounted (neither cgroup v2 with cpu in "
                            f"{listed} nor v1's {root / 'cpu' / 'cpu.cfs_quota_us'})")
    return found


class CpuQuota:
    """The cgroups of one supervisor's processes, each capped at `cores` CPUs: a group per process
    name, made at its first `cap` (a restarted process goes back into it), removed by `release`.

    Nothing is touched before the first `cap`; the controller is found then (`root`: where the
    cgroup file systems are mounted, /sys/fs/cgroup)."""

    def __init__(self, cores: float, root: Path = CGROUP_ROOT, owner_pid: int | None = None) -> None:
        quota_us(cores)  # refuses a non-positive number now, not at the first process
        self.cores = cores
        self.root = root
        self.owner_pid = owner_pid or os.getpid()
        self.groups: dict[str, Path] = {}  # process name -> its group
        self._controller: Controller | None = None

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            self._controller = detect(self.root)
            self._sweep()
        return self._controller

    def cap(self, pid: int, name: str) -> Path:
        """Move process `pid` into the group of `name` (made first if new). A process that has
        already exited is not an error: there is nothing left to cap."""
        path = self.groups.get(name) or self._make(name)
        try:
            _write(path / "cgroup.procs", str(pid))
        except ProcessLookupError:
            pass
        except OSError as exc:
            raise _not_writable(path / "cgroup.procs", exc) from exc
        return path

    def limit(self, name: str) -> tuple[int | None, int]:
        """(quota µs, period µs) of `name`'s group as the kernel holds them."""
        files = quota_files(self.controller.version, self.cores)
        return parse_limit(self.controller.version, {f: (self.groups[name] / f).read_text() for f in files})

    def throttling(self, name: str) -> Throttling:
        return parse_stat((self.groups[name] / "cpu.stat").read_text())

    def pids(self, name: str) -> list[int]:
        return parse_pids((self.groups[name] / "cgroup.procs").read_text())

    def release(self, name: str) -> None:
        """Remove `name`'s group: any process still in it goes back to the parent group first."""
        path = self.groups.pop(name, None)
        if path is not None:
            _remove(path)

    def release_all(self) -> None:
        """Remove every group made here (each tried; the first failure raised after)."""
        failed: list[CpuQuotaError] = []
        for name in list(self.groups):
            try:
                self.release(name)
            except CpuQuotaError as exc:
                failed.append(exc)
        if failed:
            raise failed[0]

    def _make(self, name: str) -> Path:
        controller = self.controller
        path = controller.root / group_name(self.owner_pid, name)
        try:
            if controller.version == 2:
                _enable_cpu(controller.root)
            path.mkdir(exist_ok=True)
            self.groups[name] = path  # released even if a write below fails
            for file, value in quota_files(controller.version, self.cores).items():
                _write(path / file, value)
        except OSError as exc:
            raise _not_writable(path, exc) from exc
        return path

    def _sweep(self) -> None:
        """Remove the empty groups a supervisor that no longer runs left behind (it was killed)."""
        assert self._controller is not None
        names = [p.name for p in self._controller.root.iterdir() if p.is_dir() and p.name.startswith(PREFIX)]
        alive = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        for name in stale_owners(names, alive):
            try:
                (self._controller.root / name).rmdir()
            except OSError:
                pass  # still holds a process (an orphan): left to whoever stops it


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:  # one write() per value, as the cgroup files want
        f.write(value)


def _not_writable(path: Path, exc: OSError) -> CpuQuotaError:
    return CpuQuotaError(f"{path}: the cpu cgroup controller is not writable here ({exc.strerror or exc}); "
                         f"CPU quotas need write access to {path.parent} (root)")


def _enable_cpu(root: Path) -> None:
    """cgroup v2: the cpu controller enabled for the root's children (cpu.max exists only then)."""
    control = root / "cgroup.subtree_control"
    if "cpu" in control.read_text().split():
        return
    try:
        _write(control, "+cpu")
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            raise
        raise CpuQuotaError(f"{control}: the cpu controller cannot be enabled for the groups: {root} holds "
                            "processes itself (a container's own cgroup), and cgroup v2 enables a controller "
                            "for the children of a group only when it holds none") from exc


def _remove(path: Path, attempts: int = 20) -> None:
    """Move what is left in group `path` to its parent, then rmdir it (a process that just
    exited may keep it busy for a moment)."""
    for _ in range(attempts):
        try:
            for pid in parse_pids((path / "cgroup.procs").read_text()):
                try:
                    _write(path.parent / "cgroup.procs", str(pid))
                except ProcessLookupError:
                    pass
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise _not_writable(path, exc) from exc
        time.sleep(0.05)
    raise CpuQuotaError(f"{path}: the group stays busy; remove it with rmdir once its processes have exited")
