"""free_port: ports for processes about to start, outside the range outgoing connections take theirs from."""

from __future__ import annotations

import socket

from bluedove.store import server


def test_ports_come_from_below_the_ephemeral_range_bindable_and_never_twice():
    low = server._ephemeral_low()
    ports = [server.free_port() for _ in range(200)]
    assert len(set(ports)) == 200
    assert all(max(1024, low - 16384) <= p < low for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when handed out


def test_a_port_in_use_is_never_handed_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(server, "_ephemeral_low", lambda: taken + 1)  # the range is [taken-16384, taken]
        draws = iter([taken, taken, taken + 0])  # the first draws hit the port in use
        real = server._RANDOM.randrange
        monkeypatch.setattr(server._RANDOM, "randrange", lambda a, b: next(draws, None) or real(a, b))
        assert server.free_port() != taken
