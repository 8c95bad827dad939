"""bluedove/runtime/tls.py: settings → gRPC credentials, uvicorn's ssl options, client contexts; plain
without a certificate. The handshakes run against in-process gRPC servers on loopback."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bluedove.client.grpc_transport import _aio_channel as sdk_channel
from bluedove.local.selfsigned import issue, make_ca
from bluedove.runtime import tls
from bluedove.runtime.settings import DispatcherSettings, MatcherSettings, TlsSettings, from_env

PLAIN = TlsSettings()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Ours (a CA, a node certificate for 127.0.0.1/localhost) and another CA's node certificate."""
    d = tmp_path_factory.mktemp("pki")
    ours = issue(d / "ours", make_ca(d / "ours"))
    theirs = issue(d / "theirs", make_ca(d / "theirs", "another CA"))
    return ours, theirs


def files(pem, ca: bool = True) -> TlsSettings:
    return TlsSettings(pem.tls_cert, pem.tls_key, pem.tls_ca if ca else "")


async def serve(s, internal: bool):
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = tls.add_port(server, "127.0.0.1:0", s, internal=internal)
    await server.start()
    return server, f"127.0.0.1:{port}"


async def check(ch: grpc.aio.Channel) -> int:
    async with ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return r.status


def test_no_certificate_is_plain_everywhere():
    assert not tls.enabled(PLAIN) and not tls.enabled(None) and not tls.mutual(PLAIN)
    assert tls.uvicorn_ssl(PLAIN) == {} and tls.uvicorn_ssl(None) == {}
    tls.check(PLAIN)  # nothing to check


def test_the_settings_read_bluedove_tls_variables(monkeypatch):
    monkeypatch.setenv("BLUEDOVE_TLS_CERT", "/c.pem")
    monkeypatch.setenv("BLUEDOVE_TLS_KEY", "/k.pem")
    monkeypatch.setenv("BLUEDOVE_TLS_CA", "/ca.pem")
    for cls in (MatcherSettings, DispatcherSettings, TlsSettings):
        s = from_env(cls)
        assert (s.tls_cert, s.tls_key, s.tls_ca) == ("/c.pem", "/k.pem", "/ca.pem")
    assert from_env(TlsSettings, tls_ca="/other.pem").tls_ca == "/other.pem"  # a flag beats the variable


@pytest.mark.parametrize("cert, key, ca, says", [
    ("C", "", "", "--tls-cert (BLUEDOVE_TLS_CERT) and --tls-key (BLUEDOVE_TLS_KEY) go together"),
    ("", "K", "", "go together"),
    ("", "", "A", "--tls-ca (BLUEDOVE_TLS_CA) needs --tls-cert and --tls-key"),
    ("C", "K", "/no/such/ca.pem", "--tls-ca /no/such/ca.pem: no such file"),
])
def test_incomplete_or_missing_files_are_refused_by_name(pki, cert, key, ca, says):
    ours, _ = pki
    s = TlsSettings(ours.tls_cert if cert == "C" else cert, ours.tls_key if key == "K" else key,
                    ours.tls_ca if ca == "A" else ca)
    with pytest.raises(tls.TlsError, match=says.replace("(", r"\(").replace(")", r"\)")):
        tls.check(s)


def test_a_key_of_another_certificate_is_refused(pki):
    ours, theirs = pki
    with pytest.raises(tls.TlsError, match="--tls-cert .* / --tls-key"):
        tls.check(TlsSettings(ours.tls_cert, theirs.tls_key))
    tls.check(files(ours))  # the right pair and its CA pass


def test_uvicorn_gets_the_pair_and_asks_no_client_certificate(pki):
    ours, _ = pki
    assert tls.uvicorn_ssl(files(ours)) == {"ssl_certfile": ours.tls_cert, "ssl_keyfile": ours.tls_key}


async def test_plain_server_and_channel_without_tls():
    server, addr = await serve(PLAIN, internal=True)
    try:
        assert await check(tls.aio_channel(addr, PLAIN)) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)


async def test_internal_port_with_a_ca_is_mutual(pki):
    """Our certificate gets in; no certificate, one of another CA, or plain text do not."""
    ours, theirs = pki
    server, addr = await serve(files(ours), internal=True)
    try:
        assert await check(tls.aio_channel(addr, files(ours))) == health_pb2.HealthCheckResponse.SERVING
        no_cert = grpc.ssl_channel_credentials(root_certificates=Path(ours.tls_ca).read_bytes())
        refused = [grpc.aio.secure_channel(addr, no_cert),
                   # another CA's certificate, trusting our CA (the server is then fine to it)
                   tls.aio_channel(addr, TlsSettings(theirs.tls_cert, theirs.tls_key, ours.tls_ca)),
                   tls.aio_channel(addr, PLAIN)]
        for ch in refused:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await check(ch)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


async def test_a_client_not_trusting_our_ca_refuses_the_server(pki):
    ours, theirs = pki
    server, addr = await serve(files(ours), internal=True)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await check(tls.aio_channel(addr, files(theirs)))  # trusts only the other CA
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


async def test_public_port_serves_clients_without_a_certificate(pki):
    ours, _ = pki
    server, addr = await serve(files(ours), internal=False)
    try:
        # the SDK's channel (bluedove/client/grpc_transport.py): grpcs:// trusts the CA file, else the system
        ch = sdk_channel(f"grpcs://{addr}", ours.tls_ca)
        assert await check(ch) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError):  # the system's roots do not know our CA
            await check(sdk_channel(f"grpcs://{addr}", None))
        with pytest.raises(grpc.aio.AioRpcError):  # plain text to a TLS port
            await check(sdk_channel(f"grpc://{addr}", None))
    finally:
        await server.stop(0)


def test_blocking_channel_is_mutual_too(pki):
    import asyncio

    ours, _ = pki

    async def run():
        server, addr = await serve(files(ours), internal=True)
        try:
            def call(s):
                with tls.channel(addr, s) as ch:
                    return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status

            assert await asyncio.to_thread(call, files(ours)) == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError):
                await asyncio.to_thread(call, PLAIN)
        finally:
            await server.stop(0)

    asyncio.run(run())


def test_client_context_trusts_the_given_ca_else_the_system(pki):
    ours, _ = pki
    ctx = tls.client_context(ours.tls_ca)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert any("bluedove local CA" in str(c.get("subject")) for c in ctx.get_ca_certs())
    assert not any("bluedove local CA" in str(c.get("subject")) for c in tls.client_context(None).get_ca_certs())


async def test_a_server_name_is_checked_instead_of_the_address(pki, tmp_path):
    """A certificate naming no address (pods gossip their IPs): --tls-server-name is what the
    peer's certificate must carry; without it the address's host is checked, and fails."""
    ours, _ = pki
    named = issue(tmp_path, (Path(ours.tls_ca), Path(ours.tls_ca).with_suffix(".key")), "named",
                  dns=("bluedove-internal",), ips=())
    server, addr = await serve(files(named), internal=True)
    try:
        by_name = TlsSettings(ours.tls_cert, ours.tls_key, ours.tls_ca, tls_server_name="bluedove-internal")
        assert await check(tls.aio_channel(addr, by_name)) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError):
            await check(tls.aio_channel(addr, files(ours)))  # 127.0.0.1 is not in the certificate
        wrong = TlsSettings(ours.tls_cert, ours.tls_key, ours.tls_ca, tls_server_name="someone-else")
        with pytest.raises(grpc.aio.AioRpcError):
            await check(tls.aio_channel(addr, wrong))
    finally:
        await server.stop(0)
