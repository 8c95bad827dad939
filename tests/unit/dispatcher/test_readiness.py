"""One readiness: gRPC health says SERVING the moment /readyz says ready, not a poll later."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import httpx
from fastapi import FastAPI
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bluedove.dispatcher.grpc_api import SERVICE, GrpcApi
from bluedove.dispatcher.routes import cluster

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class FakeStore:
    def __init__(self) -> None:
        self.up = True

    async def ping(self) -> bool:
        if not self.up:
            raise ConnectionError("refused")
        return True


async def test_grpc_health_is_serving_as_soon_as_readyz_says_ready():
    d = SimpleNamespace(cluster=SimpleNamespace(table=None), store=FakeStore())
    app = FastAPI()
    app.state.dispatcher = d
    app.include_router(cluster.router)
    api = GrpcApi(d, "127.0.0.1", 0)
    await api.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http, \
                grpc.aio.insecure_channel(f"127.0.0.1:{api.port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)

            async def check(service: str) -> int:
                return (await stub.Check(health_pb2.HealthCheckRequest(service=service))).status

            r = await http.get("/readyz")
            assert r.status_code == 503 and r.json()["problems"] == ["no segment table"]
            assert await check("") == await check(SERVICE) == NOT_SERVING
            d.cluster.table = SimpleNamespace(epoch=7)  # the table arrives
            r = await http.get("/readyz")
            assert r.status_code == 200 and r.json() == {"status": "ready", "epoch": 7}
            assert await check("") == await check(SERVICE) == SERVING
            d.store.up = False  # and the other way: the store goes away
            assert (await http.get("/readyz")).json()["problems"] == ["store unreachable: refused"]
            assert await check(SERVICE) == NOT_SERVING
    finally:
        await api.stop(0)
