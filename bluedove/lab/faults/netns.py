"""A network of our own for partition faults: each matcher in a Linux network namespace.

    root namespace: bridge bd-br0 10.231.0.1/24 (redis-server, dispatchers, the client)
      ├─ veth ─ namespace bd-m1: eth0 10.231.0.11/24 (matcher m1)
      ├─ veth ─ namespace bd-m2: eth0 10.231.0.12/24 …

Every matcher reaches every other one and the root namespace over the bridge. A partition
drops, in each namespace of one side, the packets addressed to the other side (blackhole
routes: nothing is answered, as when a switch between them fails); healing deletes them.
Needs root (CAP_NET_ADMIN); everything made here is removed by `teardown`, and leftovers of
a killed run by the next `setup`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

BRIDGE = "bd-br0"
PREFIX = "10.231.0"
ROOT_IP = f"{PREFIX}.1"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise PermissionError(f"ip {' '.join(args)}: {done.stderr.strip()} (needs root or CAP_NET_ADMIN)")
    return done


@dataclass
class Network:
    """The matchers' network namespaces on one bridge, and the addresses a partition blackholes."""

    matchers: list[str]
    # matcher id -> (namespace, address)
    hosts: dict[str, tuple[str, str]] = field(default_factory=dict)
    cut: list[tuple[str, str]] = field(default_factory=list)  # (namespace, address) blackholed

    def setup(self) -> "Network":
        self.teardown()  # what a killed run left behind
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{ROOT_IP}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i, m in enumerate(self.matchers):
            ns, host, veth = f"bd-{m}", f"{PREFIX}.{11 + i}", f"bd-v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", BRIDGE)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{host}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", ROOT_IP)
            self.hosts[m] = (ns, host)
        return self

    def matcher_net(self) -> dict[str, tuple[str, list[str]]]:
        """For LocalCluster(matcher_net=…): each matcher's address and how to run it in its namespace."""
        return {m: (host, ["ip", "netns", "exec", ns]) for m, (ns, host) in self.hosts.items()}

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        for one, other in ((side_a, side_b), (side_b, side_a)):
            for m in one:
                ns = self.hosts[m][0]
                for o in other:
                    address = self.hosts[o][1]
                    _ip("-n", ns, "route", "add", "blackhole", f"{address}/32")
                    self.cut.append((ns, address))

    def heal(self) -> None:
        for ns, address in self.cut:
            _ip("-n", ns, "route", "del", "blackhole", f"{address}/32", check=False)
        self.cut = []

    def teardown(self) -> None:
        self.heal()
        for m in self.matchers:
            _ip("netns", "del", f"bd-{m}", check=False)  # its veth end goes with it, and the peer
        _ip("link", "del", BRIDGE, check=False)


def available() -> str | None:
    """None when namespaces can be made here; else why not."""
    done = subprocess.run(["ip", "netns", "add", "bd-probe"], capture_output=True, text=True)
    if done.returncode != 0:
        return done.stderr.strip() or "ip netns add failed"
    subprocess.run(["ip", "netns", "del", "bd-probe"], capture_output=True)
    return None
