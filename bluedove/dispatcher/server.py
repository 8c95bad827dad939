"""The dispatcher process: uvicorn serving the app on a SO_REUSEPORT socket, so several
dispatcher processes share one port and the kernel spreads connections among them; the gRPC
API on the same loop, sharing its port the same way; and, started with the app, a gossip
server on a port of its own (`bluedove/dispatcher/gossip_member.py`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from bluedove.core.space import Space
from bluedove.dispatcher.app import create_app
from bluedove.dispatcher.dispatcher import Dispatcher
from bluedove.dispatcher.door import DoorConfig, Limits
from bluedove.dispatcher.grpc_api import GrpcApi
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings


def listen_socket(host: str, port: int) -> socket.socket:
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY on accepted connections
    # only then, and without it keep-alive responses stall ~40 ms on delayed ACKs.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, telling the dispatcher first when a signal asks it to exit, and
    stopping the gRPC API before the app's shutdown closes the store under it."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], object], grpc_api: GrpcApi) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._grpc_api = grpc_api

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self._grpc_api.stop()
        await super().shutdown(sockets)


def serve(settings: DispatcherSettings, space: Space, seeds: tuple[str, ...] = ()) -> None:
    sock = listen_socket(settings.host, settings.http_port)
    app = create_app(settings, space, address=f"{settings.host}:{settings.http_port}", seeds=seeds)
    # An idle keep-alive connection is kept longer than clients keep theirs (httpx: 5 s, the
    # SDK's; load balancers: 60 s): when the server closes first, a request the client sends on
    # that connection at the same moment fails with a reset it cannot tell from a crash. The
    # door (door.py) adds the body cap and the header and body timeouts to uvicorn's protocol.
    dispatcher: Dispatcher = app.state.dispatcher
    config = DoorConfig(app, Limits.of(settings), dispatcher, log_level="warning", access_log=False,
                        timeout_graceful_shutdown=5, timeout_keep_alive=settings.idle_timeout_s,
                        loop="asyncio", **tls.uvicorn_ssl(settings))
    closing = dispatcher.closing

    async def main() -> None:
        loop = asyncio.get_running_loop()
        grpc_api = GrpcApi(dispatcher, settings.host, settings.grpc_port, settings)
        await grpc_api.start()
        print(f"gRPC API on {settings.host}:{grpc_api.port}", flush=True)
        server = _Server(config, lambda: loop.call_soon_threadsafe(closing.set), grpc_api)
        await server.serve(sockets=[sock])

    asyncio.run(main())
