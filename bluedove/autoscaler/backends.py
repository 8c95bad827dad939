"""What carries out a scaling decision: the `Backend` interface and the local-process backend.

Backends are synchronous (the Kubernetes client is); the autoscaler calls them off its loop.
A backend only starts or stops matchers: a new matcher joins through gossip and is given
segments by a split; a stopped one hands its segments off before it goes (leave = merge).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Backend(Protocol):
    """What carries out the autoscaler's decisions: starts and stops matchers (local or Kubernetes)."""

    name: str

    def current(self) -> int:
        """Matchers this backend runs now."""

    def scale_to(self, n: int) -> str:
        """Start or stop matchers until `n` run; say what was done in one line."""


class Drainer(Protocol):
    """What the Kubernetes backend needs to empty a matcher before its pod goes
    (bluedove/autoscaler/drain.py: MatcherDrainer; the tests give a fake). Called off the event loop."""

    def owners(self) -> dict[str, str]:
        """The stored segment table's owners: member id -> gRPC address ("" if none stored yet)."""

    def leave(self, address: str, timeout_s: float) -> tuple[bool, str]:
        """Ask the matcher at `address` to hand its segments off (its Leave RPC): (done, why not)."""


class Process(Protocol):
    """A matcher process as the local backend sees it (LocalCluster's Child): its name, m1, m2, …"""

    @property
    def name(self) -> str: ...


class Processes(Protocol):
    """What the local backend needs of `bluedove up`'s process supervisor (LocalCluster)."""

    def matchers(self) -> Sequence[Process]: ...
    def add_matcher(self, extra_args: list[str] | None = None) -> Process: ...
    def remove_matcher(self, name: str, timeout_s: float = 60.0) -> str: ...


class LocalBackend:
    """Starts `bluedove matcher` processes, and asks the newest ones to leave."""

    name = "local"
    same_host = True  # the matchers run on the autoscaler's host: its CPU is theirs (bluedove/autoscaler/signals.py)

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self._leaving: set[str] = set()

    def running(self) -> list[str]:
        return [c.name for c in self.processes.matchers() if c.name not in self._leaving]

    def current(self) -> int:
        return len(self.running())

    def scale_to(self, n: int) -> str:
        names = self.running()
        if n > len(names):
            added = [self.processes.add_matcher().name for _ in range(n - len(names))]
            return f"started {', '.join(added)}"
        if n < len(names):
            # The newest first: the oldest hold the longest-lived connections and caches.
            victims = sorted(names, key=lambda s: int(s[1:]) if s[1:].isdigit() else 0)[n:]
            done = []
            for v in victims:
                self._leaving.add(v)
                done.append(self.processes.remove_matcher(v))
            return "; ".join(done)
        return "nothing to do"
