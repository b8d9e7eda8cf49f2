"""The gateway's legacy session id: sealed with the requestState keys under a prefix of its
own, refused when tampered, expired, foreign or misrouted (a reason for the log only); and
which method a request's scopes are checked as."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from gateway.protocol import legacy_session as ls
from gateway.protocol import state

KEY = base64.urlsafe_b64decode(state.generate_key() + "=")
OTHER = base64.urlsafe_b64decode(state.generate_key() + "=")
NOW = 1_800_000_000_000
ALICE = ls.principal_tag("jwt:https://issuer.example|alice|app")
RING = state.AesGcmKeyRing([KEY])
SESSIONS = RING.with_prefix(ls.SESSION_PREFIX)


def claims(**overrides) -> ls.SessionClaims:
    base = dict(
        upstream="legacy",
        session="3f1c-upstream-session",
        principal=ALICE,
        owner="",
        audience="test-gateway",
        created_ms=NOW,
        expires_ms=NOW + 86_400_000,
        declared=(),
    )
    base.update(overrides)
    return ls.SessionClaims(**base)


def opened(token: str, codec: state.StateCodec = SESSIONS, **overrides):
    checks = dict(now_ms=NOW + 1, principal=ALICE, upstream="legacy", audience="test-gateway")
    checks.update(overrides)
    return ls.open_session(codec, token, **checks)


def refusal(token: str, codec: state.StateCodec = SESSIONS, **overrides) -> str:
    result = opened(token, codec, **overrides)
    assert isinstance(result, ls.SessionIdRefusal), result
    return result.reason


def test_a_session_id_opens_to_the_claims_it_sealed_and_is_visible_ascii() -> None:
    token = ls.seal_session(SESSIONS, claims())
    assert token.startswith("lg1.")
    assert all(0x21 <= ord(c) <= 0x7E for c in token)
    assert opened(token) == claims()
    none = ls.seal_session(SESSIONS, claims(session=None))  # an upstream that gave no id
    assert opened(none) == claims(session=None)


def test_the_session_id_is_encrypted_and_names_no_principal() -> None:
    token = ls.seal_session(SESSIONS, claims())
    raw = base64.urlsafe_b64decode(token[4:] + "==")
    assert b"upstream-session" not in raw and b"legacy" not in raw and b"alice" not in raw


def test_every_single_bit_flip_of_a_session_id_is_refused() -> None:
    token = ls.seal_session(SESSIONS, claims())
    body = bytearray(base64.urlsafe_b64decode(token[4:] + "=="))
    for index in range(len(body)):
        for bit in (0x01, 0x80):
            flipped = bytearray(body)
            flipped[index] ^= bit
            forged = "lg1." + base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode()
            assert isinstance(opened(forged), ls.SessionIdRefusal)


@pytest.mark.parametrize(
    ("changed", "checks", "reason"),
    [
        ({"expires_ms": NOW}, {}, "expired"),
        ({}, {"principal": ls.principal_tag("jwt:https://issuer.example|mallory|app")},
         "principal mismatch"),
        ({}, {"upstream": "other-upstream"}, "another upstream's session"),
        ({}, {"audience": "another-deployment"}, "audience mismatch"),
    ],
    ids=["expired", "another principal", "another upstream's route", "another deployment"],
)  # fmt: skip
def test_a_session_id_is_refused_out_of_its_bindings(changed, checks, reason) -> None:
    assert refusal(ls.seal_session(SESSIONS, claims(**changed)), **checks) == reason


def test_a_request_state_never_opens_as_a_session_id_nor_the_reverse() -> None:
    request_state = state.seal_claims(
        RING,
        state.Claims(
            call="c1",
            round=1,
            principal="anonymous",
            digest="d",
            audience="test-gateway",
            issued_ms=NOW,
            expires_ms=NOW + 60_000,
        ),
    )
    assert refusal(request_state) == "unknown format"
    # Its prefix rewritten, it still fails: the prefix is bound into the AEAD.
    assert refusal("lg1." + request_state[4:]) == "authentication failed"
    session = ls.seal_session(SESSIONS, claims())
    with pytest.raises(state.InvalidRequestState) as caught:
        RING.unseal(session)
    assert caught.value.reason == "unknown format"
    with pytest.raises(state.InvalidRequestState) as caught:
        RING.unseal("gw1." + session[4:])
    assert caught.value.reason == "authentication failed"


def test_request_states_are_sealed_as_before_the_prefix_became_a_setting() -> None:
    """`gw1.` tokens: the same associated data (prefix and key id), so states minted by a
    replica of the previous release still open, and the reverse."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    token = RING.seal(b"payload")
    raw = base64.urlsafe_b64decode(token[4:] + "==")
    kid, nonce, sealed = raw[:4], raw[4:16], raw[16:]
    derived = state.HKDF(
        algorithm=state.SHA256(), length=32, salt=None, info=state._HKDF_INFO
    ).derive(KEY)
    assert AESGCM(derived).decrypt(nonce, sealed, b"gw1." + kid) == b"payload"


def test_a_session_id_sealed_with_another_key_is_refused_and_a_rotated_ring_opens_it() -> None:
    other = state.AesGcmKeyRing([OTHER]).with_prefix(ls.SESSION_PREFIX)
    token = ls.seal_session(other, claims())
    assert refusal(token) == "unknown key id"
    rotated = state.AesGcmKeyRing([KEY, OTHER]).with_prefix(ls.SESSION_PREFIX)
    assert opened(token, rotated) == claims()


def test_claims_of_the_wrong_shape_are_refused() -> None:
    good = json.loads(SESSIONS.unseal(ls.seal_session(SESSIONS, claims())))
    for bad in (
        {**good, "e": "tomorrow"},
        {**good, "s": 5},
        {**good, "c": True},
        {**good, "x": 1},
        {k: v for k, v in good.items() if k != "o"},
        {k: v for k, v in good.items() if k != "k"},  # version 2 says what was declared
        {**good, "k": "elicitation"},
        {**good, "k": [1]},
        {**good, "v": 1},  # version 1 has no "k"
        {**good, "v": 3},
        [good],
    ):
        assert isinstance(opened(SESSIONS.seal(json.dumps(bad).encode())), ls.SessionIdRefusal), bad
    assert refusal(SESSIONS.seal(b"not json")) == "payload not JSON"


def test_a_session_id_keeps_what_its_client_declared() -> None:
    declared = ("elicitation", "elicitation.url", "sampling")
    token = ls.seal_session(SESSIONS, claims(declared=declared))
    assert json.loads(SESSIONS.unseal(token))["v"] == 2
    assert opened(token) == claims(declared=declared)


def test_a_version_1_id_leaves_out_what_was_declared_and_opens_as_not_saying() -> None:
    """What a replica writes while one of the previous release lives, and what that
    release wrote: it reads no `k`."""
    token = ls.seal_session(SESSIONS, claims(declared=("elicitation",)), 1)
    assert "k" not in json.loads(SESSIONS.unseal(token))
    assert opened(token) == claims(declared=None)


@pytest.mark.parametrize(
    ("capabilities", "declared"),
    [
        ({}, ()),
        (None, ()),
        ({"elicitation": {}}, ("elicitation",)),  # 2025-06-18, or 2025-11-25's form only
        ({"elicitation": {"form": {}}}, ("elicitation",)),
        ({"elicitation": {"form": {}, "url": {}}}, ("elicitation", "elicitation.url")),
        ({"elicitation": {"url": {}}}, ("elicitation.url",)),  # no form: not "elicitation"
        ({"sampling": {}, "roots": {"listChanged": True}}, ("roots", "sampling")),
        ({"elicitation": True, "experimental": {"x": {}}}, ()),  # not an object; not kept
    ],
)
def test_what_a_client_declares_is_kept_by_name(capabilities: object, declared: tuple) -> None:
    assert ls.declared_of(capabilities) == declared


def test_an_upstream_session_id_that_is_not_visible_ascii_is_not_sealed() -> None:
    for bad in ("has space", "tab\t", "é", "x" * (ls.MAX_UPSTREAM_SESSION_CHARS + 1), ""):
        with pytest.raises(ValueError):
            ls.seal_session(SESSIONS, claims(session=bad))


def test_a_key_ring_refuses_a_prefix_that_is_not_a_short_tag() -> None:
    for bad in ("lg1", "LG1.", "lg 1.", "a.", "toolongprefix1."):
        with pytest.raises(ValueError):
            RING.with_prefix(bad)


# -- policy ------------------------------------------------------------------------------


def test_a_subscription_is_guarded_as_a_read_of_its_resource() -> None:
    assert ls.scoped("resources/subscribe", {"uri": "secret://x"}) == (
        "resources/read",
        {"uri": "secret://x"},
    )
    assert ls.scoped("tools/call", {"name": "echo"}) == ("tools/call", {"name": "echo"})


def test_claims_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        claims().upstream = "x"  # type: ignore[misc]


def test_an_opened_session_is_found_by_the_same_id_and_principal_only() -> None:
    cache = ls.OpenedSessions(8)
    entry = ls.Opened(claims(), "s_1")
    cache.put("lg1.id", "alice", entry)
    assert cache.get("lg1.id", "alice", NOW + 1) is entry
    assert cache.get("lg1.id", "mallory", NOW + 1) is None  # another principal: opened in full
    assert cache.get("lg1.iD", "alice", NOW + 1) is None  # another id, however close
    cache.forget("lg1.id", "alice")
    assert cache.get("lg1.id", "alice", NOW + 1) is None


def test_an_opened_session_past_its_expiry_is_never_served_and_is_dropped() -> None:
    cache = ls.OpenedSessions(8)
    cache.put("lg1.id", "alice", ls.Opened(claims(expires_ms=NOW + 10), "s_1"))
    assert cache.get("lg1.id", "alice", NOW + 9) is not None
    assert cache.get("lg1.id", "alice", NOW + 10) is None
    assert len(cache) == 0
    assert cache.get("lg1.id", "alice", NOW + 9) is None  # gone: a clock going back finds none


def test_opened_sessions_are_bounded_and_the_least_recently_used_goes_first() -> None:
    cache = ls.OpenedSessions(3)
    for name in ("a", "b", "c"):
        cache.put(name, "alice", ls.Opened(claims(), name))
    assert cache.get("a", "alice", NOW) is not None  # used: now the most recent
    cache.put("d", "alice", ls.Opened(claims(), "d"))
    assert len(cache) == 3
    assert cache.get("b", "alice", NOW) is None
    assert [cache.get(n, "alice", NOW) is not None for n in ("a", "c", "d")] == [True] * 3
