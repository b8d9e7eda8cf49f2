"""Sealed requestState: every way a token can be wrong is refused, with a reason for the log."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from gateway.errors import ConfigError, InvalidRequestState
from gateway.protocol import state

KEY = base64.urlsafe_b64decode(state.generate_key() + "=")
OTHER = base64.urlsafe_b64decode(state.generate_key() + "=")
NOW = 1_800_000_000_000


def claims(**overrides) -> state.Claims:
    base = dict(
        call="c1",
        round=1,
        principal="anonymous",
        digest="d1",
        audience="gw|up",
        issued_ms=NOW,
        expires_ms=NOW + 600_000,
    )
    base.update(overrides)
    return state.Claims(**base)


def open_(token: str, ring: state.AesGcmKeyRing | None = None, **overrides) -> state.Claims:
    checks = dict(now_ms=NOW + 1, principal="anonymous", digest="d1", audience="gw|up")
    checks.update(overrides)
    return state.open_claims(ring or state.AesGcmKeyRing([KEY]), token, **checks)


def reason(token: str, **overrides) -> str:
    with pytest.raises(InvalidRequestState) as caught:
        open_(token, **overrides)
    assert str(caught.value) == InvalidRequestState.WIRE_MESSAGE
    return caught.value.reason


def test_a_sealed_state_opens_to_the_same_claims() -> None:
    ring = state.AesGcmKeyRing([KEY])
    token = state.seal_claims(ring, claims())
    assert token.startswith("gw1.")
    assert open_(token, ring) == claims()


def test_the_state_is_encrypted_not_merely_signed() -> None:
    token = state.seal_claims(
        state.AesGcmKeyRing([KEY]), claims(principal="sha256:secret-principal")
    )
    raw = base64.urlsafe_b64decode(token[4:] + "==")
    assert b"secret-principal" not in raw and b"call" not in raw


def test_every_single_bit_flip_is_refused() -> None:
    ring = state.AesGcmKeyRing([KEY])
    token = state.seal_claims(ring, claims())
    raw = bytearray(base64.urlsafe_b64decode(token[4:] + "=" * (-len(token[4:]) % 4)))
    for index in range(len(raw)):
        for bit in (0, 7):
            flipped = bytearray(raw)
            flipped[index] ^= 1 << bit
            bad = "gw1." + base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode()
            with pytest.raises(InvalidRequestState):
                open_(bad, ring)


@pytest.mark.parametrize(
    ("mangle", "why"),
    [
        (lambda t: "gw0." + t[4:], "unknown format"),
        (lambda t: t[:20], "truncated"),
        (lambda t: t + "!", "malformed encoding"),
        (lambda t: "gw1." + "A" * 70_000, "oversized"),
        (lambda t: "", "unknown format"),
    ],
)
def test_malformed_tokens_are_refused_with_a_reason(mangle, why: str) -> None:
    token = state.seal_claims(state.AesGcmKeyRing([KEY]), claims())
    assert reason(mangle(token)) == why


def test_a_state_sealed_under_another_key_is_refused() -> None:
    token = state.seal_claims(state.AesGcmKeyRing([OTHER]), claims())
    assert reason(token) == "unknown key id"


def test_rotation_old_keys_still_open_and_the_first_key_seals() -> None:
    old_token = state.seal_claims(state.AesGcmKeyRing([OTHER]), claims())
    rotated = state.AesGcmKeyRing([KEY, OTHER])
    assert open_(old_token, rotated) == claims()
    new_token = state.seal_claims(rotated, claims())
    assert open_(new_token, state.AesGcmKeyRing([KEY])) == claims()


@pytest.mark.parametrize(
    ("checks", "why"),
    [
        ({"now_ms": NOW + 600_000}, "expired"),
        ({"principal": "sha256:mallory"}, "principal mismatch"),
        ({"digest": "another-request"}, "request mismatch"),
        ({"audience": "gw|other-upstream"}, "audience mismatch"),
    ],
)
def test_each_binding_is_checked(checks: dict, why: str) -> None:
    token = state.seal_claims(state.AesGcmKeyRing([KEY]), claims())
    assert reason(token, **checks) == why


def test_a_payload_of_the_wrong_shape_is_refused_even_if_authentic() -> None:
    ring = state.AesGcmKeyRing([KEY])
    assert reason(ring.seal(b"[1,2,3]")) == "payload shape"
    assert reason(ring.seal(b"not json")) == "payload not JSON"
    bad_type = dataclasses.asdict(claims())
    bad_type["round"] = "1"
    import json

    assert reason(ring.seal(json.dumps(bad_type).encode())) == "claim round has the wrong type"


def test_the_owner_claim_is_optional_typed_and_nothing_else_may_be_added() -> None:
    """A state names the replica that parked its round (for a retry that finds no record
    after the store lost its data); one minted before that claim existed still opens."""
    import json

    ring = state.AesGcmKeyRing([KEY])
    named = claims(owner="gw-0~1a2b3c4d")
    assert open_(state.seal_claims(ring, named), ring) == named
    without = dataclasses.asdict(claims())
    del without["owner"]
    assert open_(ring.seal(json.dumps(without).encode()), ring) == claims()
    assert b"owner" not in claims().to_bytes()  # not written when it names nobody
    wrong = dataclasses.asdict(claims(owner="x"))
    wrong["owner"] = 7
    assert reason(ring.seal(json.dumps(wrong).encode())) == "claim owner has the wrong type"
    extra = dataclasses.asdict(claims()) | {"admin": True}
    assert reason(ring.seal(json.dumps(extra).encode())) == "payload shape"
    missing = dataclasses.asdict(claims())
    del missing["round"]
    assert reason(ring.seal(json.dumps(missing).encode())) == "payload shape"


def test_digest_binds_method_target_and_arguments_in_any_key_order() -> None:
    a = state.request_digest("tools/call", "greet", {"x": 1, "y": [1, 2]})
    assert a == state.request_digest("tools/call", "greet", {"y": [1, 2], "x": 1})
    assert a != state.request_digest("tools/call", "greet", {"x": 2, "y": [1, 2]})
    assert a != state.request_digest("prompts/get", "greet", {"x": 1, "y": [1, 2]})
    assert state.request_digest("tools/call", "t", None) == state.request_digest(
        "tools/call", "t", {}
    )


def test_a_request_digest_is_worked_out_only_when_asked_for() -> None:
    unencodable = object()  # serialising it would raise: creating the digest must not
    digest = state.RequestDigest("tools/call", "echo", unencodable)
    with pytest.raises(TypeError):
        _ = digest.value
    lazy = state.RequestDigest("tools/call", "greet", {"x": 1})
    assert lazy.value == state.request_digest("tools/call", "greet", {"x": 1})
    assert lazy.value == lazy.value  # worked out once, then kept
    assert state.RequestDigest.known("d1").value == "d1"


def test_principal_is_a_hash_of_the_credentials_or_anonymous() -> None:
    assert state.principal_of(None) == "anonymous"
    alice = state.principal_of("Bearer alice")
    assert alice.startswith("sha256:") and "alice" not in alice
    assert alice != state.principal_of("Bearer bob")


@pytest.mark.parametrize(
    "text",
    [
        "short",
        "A" * 43,
        "0" * 64,
        "%%%not-base64%%%",
        "correct horse battery staple, my gateway sealing passphrase 2026!",
        "x2Fz!" + "Q" * 40,
    ],
    ids=["short", "zeros-b64", "zeros-hex", "garbage", "passphrase", "stray-character"],
)
def test_weak_or_malformed_keys_are_refused_with_a_hint(text: str) -> None:
    with pytest.raises(ConfigError, match="mrtr-gateway keygen"):
        state.parse_key(text, "test key")


def test_generated_keys_parse_in_base64url_and_hex() -> None:
    key = state.generate_key()
    raw = state.parse_key(key, "k")
    assert len(raw) == 32
    assert state.parse_key(raw.hex(), "k") == raw
    padded = base64.b64encode(raw).decode()  # as `openssl rand -base64 32` writes one
    assert state.parse_key(padded, "k") == raw
    assert state.parse_key(base64.urlsafe_b64encode(raw).decode(), "k") == raw


def test_a_ring_rejects_duplicate_keys() -> None:
    with pytest.raises(ConfigError, match="repeats"):
        state.AesGcmKeyRing([KEY, KEY])


def test_a_call_run_again_gets_a_new_id_that_names_its_first() -> None:
    first = state.new_call_id()
    again = state.rerun_id(first)
    third = state.rerun_id(again)
    assert len({first, again, third}) == 3  # each run its own record
    assert state.first_id(again) == state.first_id(third) == state.first_id(first) == first
