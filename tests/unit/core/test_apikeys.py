"""bluedove/core/apikeys.py: the key format, scopes and the check of a presented secret."""

from __future__ import annotations

import pytest

from bluedove.core.apikeys import KeyRecord, check_scopes, digest, key_id_of, new_key, split_key, verify


def test_a_new_key_splits_into_its_id_and_a_secret_whose_digest_is_stored():
    key, key_id, dig = new_key()
    assert key.startswith(f"bdk_{key_id}_") and len(key_id) == 16
    got_id, secret = split_key(key)
    assert got_id == key_id and digest(secret) == dig and secret not in dig
    assert new_key()[0] != key


@pytest.mark.parametrize("bad", [None, "", "bdq_" + "a" * 43, "bdk_0123", "bdk_0123456789abcdef_short",
                                 "bdk_0123456789ABCDEF_" + "a" * 43, "xbdk_0123456789abcdef_" + "a" * 43])
def test_anything_else_is_not_a_key(bad):
    assert split_key(bad) is None


def test_revoke_takes_the_key_or_its_id():
    key, key_id, _ = new_key()
    assert key_id_of(key) == key_id and key_id_of(key_id) == key_id
    assert key_id_of("bdq_token") is None and key_id_of("0123") is None


def test_verify_needs_the_right_secret_and_a_live_key():
    key, key_id, dig = new_key()
    secret = split_key(key)[1]
    rec = KeyRecord(key_id, dig, ("publish",))
    assert verify(rec, secret)
    assert not verify(rec, split_key(new_key()[0])[1])
    assert not verify(None, secret)
    assert not verify(KeyRecord(key_id, dig, ("publish",), revoked=1.0), secret)


def test_admin_implies_every_scope_and_the_others_only_themselves():
    assert KeyRecord("i", "d", ("admin",)).allows("publish") and KeyRecord("i", "d", ("admin",)).allows("subscribe")
    pub = KeyRecord("i", "d", ("publish",))
    assert pub.allows("publish") and not pub.allows("subscribe") and not pub.allows("admin")


def test_scopes_are_checked_and_deduplicated():
    assert check_scopes(["subscribe", "publish", "publish"]) == ("publish", "subscribe")
    with pytest.raises(ValueError, match="'write'"):
        check_scopes(["publish", "write"])
    with pytest.raises(ValueError, match="at least one"):
        check_scopes([])


def test_the_public_view_has_no_digest():
    assert "digest" not in KeyRecord("i", "d", ("publish",)).public()
