"""The compiled loops of every role, compiled once by the supervisor before it starts them.

Matchers and dispatchers compile their numba loops as they start, or load them from the
on-disk cache (bluedove/core/jit.py). With the cache cold (a fresh install, a fresh checkout),
four matchers starting together would each compile all of them at once: ~40 s each on two
busy cores, past the cluster's start-up wait. Compiled here first, each child loads them
(~1 s); in a process that has compiled them already, this costs nothing.
"""

from __future__ import annotations

from bluedove.core import forwarding, replay_match
from bluedove.matcher import warm


def compile_once() -> None:
    """Every loop a matcher or a dispatcher warms at start, compiled or loaded from the cache."""
    warm.warm_up()
    forwarding.warm_up()
    replay_match.warm_up()
