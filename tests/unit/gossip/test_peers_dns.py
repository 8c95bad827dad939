"""`--peers-dns NAME[:PORT]`: the spec's parsing and its resolution to gossip seeds."""

import socket

import pytest

from bluedove.gossip.peers import PeersSpecError, parse_spec, resolve_peers


@pytest.mark.parametrize("spec, expected", [
    ("bluedove-matcher-headless.ns.svc", ("bluedove-matcher-headless.ns.svc", 7001)),
    ("bluedove-matcher-headless.ns.svc:7100", ("bluedove-matcher-headless.ns.svc", 7100)),
    ("localhost", ("localhost", 7001)),
    ("[::1]:7002", ("::1", 7002)),
    ("[::1]", ("::1", 7001)),
])
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec, says", [
    ("", "empty"), (":7001", "no name"), ("name:port", "port must be"), ("name:0", "port must be"),
    ("name:70000", "port must be"), ("[::1", "expected"),
])
def test_bad_spec_is_refused_with_the_reason(spec, says):
    with pytest.raises(PeersSpecError, match=says):
        parse_spec(spec)


def test_localhost_resolves_to_loopback_with_the_port():
    peers = resolve_peers("localhost:7005")
    assert peers and all(p.endswith(":7005") for p in peers)
    assert "127.0.0.1:7005" in peers or "[::1]:7005" in peers


def test_every_record_once_sorted_ipv6_bracketed():
    def resolver(host, port, type):  # noqa: A002 - getaddrinfo's keyword
        assert (host, port, type) == ("svc", 7001, socket.SOCK_STREAM)
        return [(socket.AF_INET, type, 6, "", ("10.0.0.2", port)),
                (socket.AF_INET, type, 6, "", ("10.0.0.1", port)),
                (socket.AF_INET, type, 6, "", ("10.0.0.2", port)),
                (socket.AF_INET6, type, 6, "", ("fd00::1", port, 0, 0))]
    assert resolve_peers("svc", resolver=resolver) == ["10.0.0.1:7001", "10.0.0.2:7001", "[fd00::1]:7001"]


def test_a_name_that_does_not_resolve_gives_no_seeds_yet():
    def resolver(*_a, **_k):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert resolve_peers("bluedove-matcher-headless.nowhere.svc", resolver=resolver) == []


async def test_dns_seeds_resolve_again_until_a_peer_is_heard_from_and_never_seed_ourselves():
    """The name is resolved every round while the node has heard from nobody (a StatefulSet's
    first pods start before DNS lists them), and no more once a peer has spoken."""
    import asyncio

    from bluedove.gossip.messages import MemberState
    from bluedove.gossip.peers import DnsSeeds
    from bluedove.gossip.state import Node

    answers = [[], ["10.0.0.1:7001"], ["10.0.0.1:7001", "10.0.0.2:7001"]]
    calls = []

    def resolver(spec):
        calls.append(spec)
        return answers[min(len(calls) - 1, len(answers) - 1)]

    node = Node("m1", "10.0.0.1:7001", 1)
    seeds = DnsSeeds(node, "svc:7001", fixed=["join:7001", ""], retry_s=0.01, resolver=resolver)
    assert node.seeds == ("join:7001",)
    task = asyncio.create_task(seeds.run())
    while len(calls) < 3:
        await asyncio.sleep(0.01)
    assert node.seeds == ("join:7001", "10.0.0.2:7001")  # our own address is never a seed
    node.members["m2"] = MemberState("m2", "10.0.0.2:7001", generation=5)  # heard from
    n = len(calls)
    await asyncio.sleep(0.1)
    task.cancel()
    assert len(calls) <= n + 1  # at most the round already under way
