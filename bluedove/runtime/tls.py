"""TLS for every port: one place turns the TLS settings (--tls-cert, --tls-key, --tls-ca; env
BLUEDOVE_TLS_CERT, BLUEDOVE_TLS_KEY, BLUEDOVE_TLS_CA) into gRPC server and channel credentials,
uvicorn's ssl options and client ssl contexts. No certificate configured: everything is plain.

Two kinds of port (docs/security.md, "TLS"):

- internal (the matchers' gRPC server, the dispatchers' gossip port): TLS with the certificate;
  with a CA, *mutual* TLS: a client must present a certificate that CA signed, and our own
  channels to those ports present ours;
- public (the dispatchers' REST and gRPC API): TLS with the certificate, never asking clients
  for one (they authenticate with queue tokens); the CA is not used there.

`settings` below is any object with `tls_cert`, `tls_key` and `tls_ca` (file paths, "" = none):
MatcherSettings, DispatcherSettings or TlsSettings.
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import grpc

Options = Sequence[tuple[str, object]]


class TlsFiles(Protocol):
    """Any settings with TLS: certificate, key and CA files, and the name to expect of peers
    (read-only, as the frozen settings classes have them)."""

    @property
    def tls_cert(self) -> str: ...

    @property
    def tls_key(self) -> str: ...

    @property
    def tls_ca(self) -> str: ...

    @property
    def tls_server_name(self) -> str: ...


class TlsError(ValueError):
    """TLS settings that cannot work; the message names the flag and its variable."""


def enabled(s: TlsFiles | None) -> TypeGuard[TlsFiles]:
    return s is not None and bool(s.tls_cert)


def mutual(s: TlsFiles | None) -> bool:
    """Internal ports ask for (and our channels present) a client certificate."""
    return enabled(s) and bool(s.tls_ca)


def check(s: TlsFiles) -> None:
    """Raise TlsError unless the settings are whole and their files load as a key pair."""
    cert, key, ca = s.tls_cert, s.tls_key, s.tls_ca
    if bool(cert) != bool(key):
        raise TlsError("--tls-cert (BLUEDOVE_TLS_CERT) and --tls-key (BLUEDOVE_TLS_KEY) go together")
    if ca and not cert:
        raise TlsError("--tls-ca (BLUEDOVE_TLS_CA) needs --tls-cert and --tls-key: the CA turns on mutual TLS, "
                       "where each process presents its own certificate")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca)):
        if path and not Path(path).is_file():
            raise TlsError(f"{flag} {path}: no such file")
    if cert:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(cert, key)
            if ca:
                ctx.load_verify_locations(ca)
        except ssl.SSLError as exc:
            raise TlsError(f"--tls-cert {cert} / --tls-key {key}" + (f" / --tls-ca {ca}" if ca else "")
                           + f": {exc.reason or exc}") from None


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


# -- gRPC ---------------------------------------------------------------------------------
def server_credentials(s: TlsFiles, internal: bool) -> grpc.ServerCredentials:
    """An internal port with a CA requires a client certificate that CA signed."""
    client_auth = internal and mutual(s)
    return grpc.ssl_server_credentials([(Path(s.tls_key).read_bytes(), Path(s.tls_cert).read_bytes())],
                                       root_certificates=_read(s.tls_ca) if client_auth else None,
                                       require_client_auth=client_auth)


def add_port(server: grpc.aio.Server, address: str, s: TlsFiles | None, *, internal: bool) -> int:
    """Bind `address` on `server`, with TLS when `s` names a certificate; the port bound."""
    if not enabled(s):
        return server.add_insecure_port(address)
    return server.add_secure_port(address, server_credentials(s, internal))


def channel_credentials(s: TlsFiles) -> grpc.ChannelCredentials:
    """For our channels to internal ports: trust the CA (the system's roots without one) and,
    with a CA, present our certificate."""
    if mutual(s):
        return grpc.ssl_channel_credentials(root_certificates=_read(s.tls_ca), private_key=_read(s.tls_key),
                                            certificate_chain=_read(s.tls_cert))
    return grpc.ssl_channel_credentials()


def _options(s: TlsFiles, options: Options) -> list[tuple[str, object]]:
    """With a server name: the peer's certificate must carry it, whatever host the address has."""
    name = getattr(s, "tls_server_name", "")
    return [*options, ("grpc.ssl_target_name_override", name)] if name else list(options)


def aio_channel(address: str, s: TlsFiles | None, options: Options = ()) -> grpc.aio.Channel:
    """An asyncio channel to an internal port (a matcher's, a dispatcher's gossip port)."""
    if not enabled(s):
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, channel_credentials(s), options=_options(s, options))


def channel(address: str, s: TlsFiles | None, options: Options = ()) -> grpc.Channel:
    """A blocking channel to an internal port."""
    if not enabled(s):
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(address, channel_credentials(s), options=_options(s, options))


# -- HTTP ---------------------------------------------------------------------------------
def uvicorn_ssl(s: TlsFiles | None) -> dict[str, Any]:
    """uvicorn.Config's keyword arguments for the public REST port (clients need no certificate)."""
    if not enabled(s):
        return {}
    return {"ssl_certfile": s.tls_cert, "ssl_keyfile": s.tls_key}


def client_context(ca: str | None) -> ssl.SSLContext:
    """A client's context for https://: verifies the server against `ca`, else the system's roots."""
    return ssl.create_default_context(cafile=ca or None)


# -- command-line flags -------------------------------------------------------------------
def add_flags(p: argparse.ArgumentParser, what: str = "this process's ports") -> None:
    """--tls-cert, --tls-key, --tls-ca on a parser (None = the BLUEDOVE_TLS_* variable, else plain)."""
    p.add_argument("--tls-cert", default=None, metavar="FILE",
                   help=f"PEM certificate (chain) for TLS on {what}; its names must be the addresses it is "
                        "reached at (default BLUEDOVE_TLS_CERT, else plain)")
    p.add_argument("--tls-key", default=None, metavar="FILE",
                   help="the certificate's PEM private key (default BLUEDOVE_TLS_KEY)")
    p.add_argument("--tls-ca", default=None, metavar="FILE",
                   help="PEM CA: mutual TLS inside the cluster (internal ports require a certificate this CA "
                        "signed, and ours is presented to them); default BLUEDOVE_TLS_CA")
    p.add_argument("--tls-server-name", default=None, metavar="NAME",
                   help="the name the other processes' certificates must carry, checked instead of the host of "
                        "their address (for addresses no certificate names, like pod IPs); default "
                        "BLUEDOVE_TLS_SERVER_NAME, else the host")


def overrides(args: argparse.Namespace) -> dict[str, str | None]:
    """The flags as settings overrides (from_env's keyword arguments)."""
    return {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_ca": args.tls_ca,
            "tls_server_name": args.tls_server_name}
