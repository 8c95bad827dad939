"""API keys: their format, scopes and the check of a presented key (docs/api.md, "API keys").

A key is `bdk_<id>_<secret>`: `id`, 16 hex digits, is public (it names the key in `bluedove
keys list`, in logs and in the dedup marks of its messages); `secret`, 256 random bits
url-safe, is shown once. The store keeps the SHA-256 of the secret, never the secret: a
secret of 256 random bits needs no slow KDF, as nobody can guess one to match a stolen hash.
Pure: no I/O; bluedove/store/apikeys.py keeps the records, bluedove/dispatcher/auth.py checks requests.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from bluedove.core.spaces import SPACE_NAME

PREFIX = "bdk_"
PUBLISH, SUBSCRIBE, ADMIN = "publish", "subscribe", "admin"
SCOPES = (PUBLISH, SUBSCRIBE, ADMIN)
_KEY_RE = re.compile(r"bdk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_ID_RE = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class KeyRecord:
    """A key as the store keeps it: no secret, its digest. Rates 0 = unlimited; a burst 0 =
    one second's worth of the rate."""

    id: str
    digest: str
    scopes: tuple[str, ...]
    name: str = ""
    rate_msgs: float = 0.0
    rate_bytes: float = 0.0
    burst_msgs: float = 0.0
    burst_bytes: float = 0.0
    created: float = 0.0
    revoked: float = 0.0  # when it was revoked (Unix time); 0 = valid
    spaces: tuple[str, ...] = ()  # the spaces it may use; () = every space

    def allows(self, scope: str) -> bool:
        """`admin` implies every scope."""
        return scope in self.scopes or ADMIN in self.scopes

    def in_space(self, space: str) -> bool:
        """It may publish, subscribe and (with `admin`) create and delete in `space`."""
        return not self.spaces or space in self.spaces

    def public(self) -> dict[str, Any]:
        """What `bluedove keys list` shows: everything but the digest."""
        return {"id": self.id, "name": self.name, "scopes": list(self.scopes), "rate_msgs": self.rate_msgs,
                "rate_bytes": self.rate_bytes, "burst_msgs": self.burst_msgs, "burst_bytes": self.burst_bytes,
                "created": self.created, "revoked": self.revoked or None, "spaces": list(self.spaces) or None}


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """(key, id, digest of its secret): the key is shown once, the rest is stored."""
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return f"{PREFIX}{key_id}_{secret}", key_id, digest(secret)


def split_key(key: str | None) -> tuple[str, str] | None:
    """(id, secret) of a well-formed key; None for anything else (a queue token, garbage)."""
    m = _KEY_RE.fullmatch(key or "")
    return (m.group(1), m.group(2)) if m else None


def key_id_of(key_or_id: str) -> str | None:
    """The id named by a key or by its id (`bluedove keys revoke` takes either)."""
    if _ID_RE.fullmatch(key_or_id):
        return key_or_id
    parts = split_key(key_or_id)
    return parts[0] if parts else None


def check_scopes(scopes: list[str]) -> tuple[str, ...]:
    """The scopes, deduplicated in SCOPES' order; ValueError naming an unknown one or none."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r} (expected {', '.join(SCOPES)})")
    if not scopes:
        raise ValueError(f"a key needs at least one scope ({', '.join(SCOPES)})")
    return tuple(s for s in SCOPES if s in scopes)


def check_key_spaces(names: list[str]) -> tuple[str, ...]:
    """The spaces a key is limited to, deduplicated in their order; ValueError naming one that
    cannot be a space's name."""
    bad = [n for n in names if SPACE_NAME.fullmatch(n) is None]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a space name (1 to 63 characters of a-z, 0-9 and '-')")
    return tuple(dict.fromkeys(names))


def verify(record: KeyRecord | None, secret: str) -> bool:
    """The secret matches a key that is not revoked (constant time in the secret)."""
    ok = hmac.compare_digest(record.digest if record else "0" * 64, digest(secret))
    return ok and record is not None and not record.revoked
