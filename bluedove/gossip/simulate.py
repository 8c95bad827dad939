"""Measurements of the gossip protocol on the simulated network (tests and `bluedove bench gossip`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bluedove.gossip.config import GossipConfig
from bluedove.gossip.memory import SimNetwork
from bluedove.gossip.messages import DEAD
from bluedove.gossip.state import Node

WARM_S = 4.0  # long enough for every node to learn every other through the seed


def _warm(n: int, seed: int, loss: float = 0.0, config: GossipConfig | None = None,
          count_bytes: bool = False) -> tuple[SimNetwork, list[Node]]:
    net = SimNetwork(seed=seed, loss=loss, count_bytes=count_bytes)
    nodes = net.spawn(n, config)
    net.run_until(WARM_S)
    return net, nodes


def _until(net: SimNetwork, done: Callable[[], bool], limit_s: float, step_s: float = 0.01) -> float | None:
    """Run until `done()` holds; the simulated time it took, or None past the limit."""
    start = net.now
    while net.now - start < limit_s:
        if done():
            return net.now - start
        net.run_until(net.now + step_s)
    return None


def rounds_to_converge(n: int, seed: int = 1, loss: float = 0.0) -> float:
    """Rounds until a change made at one member (a new table epoch) is known to all."""
    net, nodes = _warm(n, seed, loss)
    nodes[n // 2].offer_table(99, "{}")
    took = _until(net, lambda: all(x.epoch == 99 for x in nodes), limit_s=60.0)
    if took is None:
        raise AssertionError(f"a change did not reach all {n} members in 60 s")
    return took / nodes[0].config.interval_s


@dataclass
class Detection:
    """How long after a crash the first live member, and then all of them, declared it dead."""

    first_s: float  # SIGKILL to the first member declaring it dead
    all_s: float    # SIGKILL to every live member declaring it dead


def detection_time(n: int, seed: int = 1, loss: float = 0.0, config: GossipConfig | None = None) -> Detection:
    net, nodes = _warm(n, seed, loss, config)
    victim, others = nodes[-1], nodes[:-1]
    net.crash(victim.addr)
    first: list[float] = []

    def done() -> bool:
        dead = [x for x in others if x.members[victim.id].status == DEAD]
        if dead and not first:
            first.append(net.now)
        return len(dead) == len(others)

    start = net.now
    took = _until(net, done, limit_s=60.0)
    if took is None:
        raise AssertionError(f"a crashed member was not declared dead by all {n - 1} in 60 s")
    return Detection(first[0] - start, took)


def false_deaths(n: int, rounds: int, loss: float, seed: int = 1) -> tuple[int, int]:
    """(deaths, suspicions) declared of live members over `rounds` rounds with message loss."""
    net, nodes = _warm(n, seed, loss)
    net.run_until(net.now + rounds * nodes[0].config.interval_s)
    events = [e for x in nodes for e in x.events]
    return sum(1 for e in events if e[2] == "dead"), sum(1 for e in events if e[2] == "suspect")


def bytes_per_member_s(n: int, seconds: float = 10.0, seed: int = 1) -> float:
    """Mean gossip bytes sent per member per second, in steady state (envelopes as encoded)."""
    net, nodes = _warm(n, seed, count_bytes=True)
    before = sum(net.bytes_sent.values())
    net.run_until(net.now + seconds)
    return (sum(net.bytes_sent.values()) - before) / n / seconds


def envelopes_per_member_s(n: int, seconds: float = 10.0, seed: int = 1) -> float:
    """Mean envelopes sent per member per second in steady state: on a real network each costs
    a stream write and a read, whatever its size."""
    net, nodes = _warm(n, seed)
    net.run_until(net.now + 2.0)  # past the joins' news
    before = sum(net.sent.values())
    net.run_until(net.now + seconds)
    return (sum(net.sent.values()) - before) / n / seconds
