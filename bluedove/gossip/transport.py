"""The one interface a gossip driver needs from a network: send an envelope, fire and forget.

Delivery is best effort (a lost envelope is the protocol's business, not the transport's).
Implementations: `bluedove.gossip.memory.MemoryTransport` (a simulated network on a simulated clock)
and `bluedove.gossip.grpc_transport.GrpcTransport` (unary calls to the matcher's gRPC server).
"""

from __future__ import annotations

from typing import Protocol

from bluedove.gossip.messages import Envelope


class Transport(Protocol):
    """Sends envelopes to members' addresses, best effort (a simulated network, or gRPC)."""

    def send(self, addr: str, envelope: Envelope) -> None:
        """Start sending `envelope` to the member at `addr`; never raises for a lost message."""
