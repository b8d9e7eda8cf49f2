"""Sealed `requestState`: an AES-256-GCM key ring and the claims it protects.

`requestState` travels through the client, so it is attacker-controlled input.
The gateway seals a small set of claims (which call, which round, who, for which
request, for which audience, until when) with authenticated encryption; a
client can neither read nor forge it. Every verification failure raises
`InvalidRequestState` whose reason is for the log only: the wire always gets the
same frozen error.

Token: ``gw1.`` + base64url(kid[4] | nonce[12] | ciphertext+tag), where the
prefix and kid are bound in as associated data. `keys[0]` seals, every key
opens (rotation). Keys are stretched with HKDF-SHA256. The same keys seal other
tokens under prefixes of their own (`AesGcmKeyRing.with_prefix`: the legacy lane's
session ids, ``lg1.``): the prefix is in the associated data, so a token of one kind
never opens as another, even with its prefix rewritten.

The prefix is the token's version; the sealed claims carry their own (`"v"`, from version 2
on; `gateway.protocol.formats`): a replica seals in the version every live replica opens
and opens the versions this release reads.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import field
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gateway.errors import ConfigError, InvalidRequestState
from gateway.immutable import immutable
from gateway.protocol import formats, jsonrpc
from gateway.protocol.formats import Kind

PREFIX = "gw1."
MAX_TOKEN_CHARS = 64 * 1024
MIN_KEY_BYTES = 32
_KID_BYTES = 4
_NONCE_BYTES = 12
_TAG_BYTES = 16
_HKDF_INFO = b"mrtr-gateway requestState aes-256-gcm v1"
_KID_INFO = b"mrtr-gateway requestState kid v1"
_LOG_INFO = b"mrtr-gateway caller log ids v1"
KEYGEN_HINT = "generate one with: mrtr-gateway keygen"


class StateCodec(Protocol):
    """Authenticated encryption of opaque bytes into a URL-safe token."""

    def seal(self, payload: bytes) -> str: ...

    def unseal(self, token: str) -> bytes:
        """Raises: InvalidRequestState for any token this codec did not mint unmodified."""
        ...


_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


def _b64u(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64u_decode(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64u(raw) != text:  # only the canonical encoding opens
        raise ValueError("non-canonical base64url")
    return raw


def generate_key() -> str:
    """A fresh sealing key: 32 random bytes, base64url without padding."""
    return _b64u(secrets.token_bytes(MIN_KEY_BYTES))


def parse_key(text: str, where: str) -> bytes:
    """Decode one configured key (base64url or hex of at least 32 bytes).

    Raises:
        ConfigError: naming `where` and how to generate a good key. Never coerces.
    """
    text = text.strip()
    raw: bytes | None = None
    if len(text) >= 2 * MIN_KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in text):
        raw = bytes.fromhex(text) if len(text) % 2 == 0 else None
    if raw is None and _BASE64.fullmatch(text):
        # base64url as keygen writes it, or standard base64 (`openssl rand -base64 32`);
        # nothing outside the alphabet, which a lenient decoder would skip, so that a
        # passphrase is refused, not taken for a key.
        body = text.rstrip("=").replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None:
        raise ConfigError(f"{where}: not a base64url or hex key; {KEYGEN_HINT}")
    if len(raw) < MIN_KEY_BYTES:
        raise ConfigError(
            f"{where}: a sealing key needs at least {MIN_KEY_BYTES} random bytes, "
            f"this one has {len(raw)}; {KEYGEN_HINT}"
        )
    if len(set(raw)) < 8:
        raise ConfigError(f"{where}: this key is a placeholder, not random bytes; {KEYGEN_HINT}")
    return raw


class AesGcmKeyRing:
    """The built-in codec: AES-256-GCM under HKDF-derived keys; `keys[0]` seals. Its tokens
    start with `prefix` (requestState's by default), which is bound into each one."""

    def __init__(self, keys: Sequence[bytes], *, prefix: str = PREFIX) -> None:
        _check_prefix(prefix)
        self.prefix = prefix
        self._aad_prefix = prefix.encode()
        if not keys:
            raise ConfigError(f"at least one sealing key is required; {KEYGEN_HINT}")
        self._ring: dict[bytes, AESGCM] = {}
        self.kids: list[str] = []
        for index, secret in enumerate(keys):
            if not isinstance(secret, bytes) or len(secret) < MIN_KEY_BYTES:
                raise ConfigError(
                    f"sealing key #{index + 1} must be at least {MIN_KEY_BYTES} bytes; "
                    f"{KEYGEN_HINT}"
                )
            derived = HKDF(algorithm=SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(secret)
            kid = hashlib.sha256(_KID_INFO + derived).digest()[:_KID_BYTES]
            if kid in self._ring:
                raise ConfigError(f"sealing key #{index + 1} repeats an earlier key")
            self._ring[kid] = AESGCM(derived)
            self.kids.append(kid.hex())
        self._seal_kid = next(iter(self._ring))

    @classmethod
    def ephemeral(cls) -> AesGcmKeyRing:
        return cls([os.urandom(MIN_KEY_BYTES)])

    def with_prefix(self, prefix: str) -> AesGcmKeyRing:
        """The same keys sealing tokens of another kind, under `prefix` (e.g. ``lg1.``)."""
        _check_prefix(prefix)
        other = copy.copy(self)
        other.prefix, other._aad_prefix = prefix, prefix.encode()
        return other

    def seal(self, payload: bytes) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        aad = self._aad_prefix + self._seal_kid
        sealed = self._ring[self._seal_kid].encrypt(nonce, payload, aad)
        return self.prefix + _b64u(self._seal_kid + nonce + sealed)

    def unseal(self, token: str) -> bytes:
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidRequestState("oversized")
        prefix = self.prefix
        if not token.startswith(prefix):
            raise InvalidRequestState("unknown format")
        try:
            raw = _b64u_decode(token[len(prefix) :])
        except (binascii.Error, ValueError) as exc:
            raise InvalidRequestState("malformed encoding") from exc
        if len(raw) < _KID_BYTES + _NONCE_BYTES + _TAG_BYTES:
            raise InvalidRequestState("truncated")
        kid = raw[:_KID_BYTES]
        nonce = raw[_KID_BYTES : _KID_BYTES + _NONCE_BYTES]
        aead = self._ring.get(kid)
        if aead is None:
            raise InvalidRequestState("unknown key id")
        try:
            return aead.decrypt(nonce, raw[_KID_BYTES + _NONCE_BYTES :], self._aad_prefix + kid)
        except InvalidTag as exc:
            raise InvalidRequestState("authentication failed") from exc


_PREFIX_FORM = re.compile(r"[a-z][a-z0-9]{1,7}\.")


def _check_prefix(prefix: str) -> None:
    """A token prefix is a short lower-case tag and a dot (`gw1.`): visible ASCII that no
    base64url body starts with a dot of."""
    if not _PREFIX_FORM.fullmatch(prefix):
        raise ValueError(f"a token prefix is a short lower-case tag and a dot, not {prefix!r}")


#: The version of the claims this release seals once the whole fleet opens it.
CLAIMS_VERSION = formats.written(Kind.REQUEST_STATE, formats.LEVEL)


@immutable(kw_only=True)
class Claims:
    """What a sealed `requestState` asserts."""

    call: str  # the suspended call's id (names its store record)
    round: int  # the round this state resumes
    principal: str  # who may present it
    digest: str  # method + target + arguments it belongs to
    audience: str  # which gateway deployment and route minted it
    issued_ms: int
    expires_ms: int
    mode: str = "park"  # park: the call waits in a store; replay: it is re-run from `journal`
    journal: list[dict[str, Any]] = field(default_factory=list)  # replay-mode answers
    # The replica that parked the round (writes its record back if the store loses it);
    # absent from states minted before it was claimed, and from replay-mode ones.
    owner: str = ""

    def to_bytes(self, version: int = CLAIMS_VERSION) -> bytes:
        """Compact JSON of every claim, in `version` (what `open_claims` reads back)."""
        claims = {name: getattr(self, name) for name in _CLAIM_TYPES}
        for name in _OPTIONAL_CLAIMS:  # a loop: no generator run by `update`
            if value := getattr(self, name):
                claims[name] = value
        return jsonrpc.dumps(formats.stamped(Kind.REQUEST_STATE, claims, version))


_CLAIM_TYPES: dict[str, type | tuple[type, ...]] = {
    "call": str,
    "round": int,
    "principal": str,
    "digest": str,
    "audience": str,
    "issued_ms": int,
    "expires_ms": int,
    "mode": str,
    "journal": list,
}
#: Claims a state may carry or not (one minted before the claim was added has none).
_OPTIONAL_CLAIMS: dict[str, type] = {"owner": str}
# What `open_claims` checks a payload's members against, made once.
_REQUIRED = frozenset(_CLAIM_TYPES)
_KNOWN = frozenset(_CLAIM_TYPES) | frozenset(_OPTIONAL_CLAIMS)
_KNOWN_TYPES = tuple({**_CLAIM_TYPES, **_OPTIONAL_CLAIMS}.items())


def seal_claims(codec: StateCodec, claims: Claims, version: int = CLAIMS_VERSION) -> str:
    return codec.seal(claims.to_bytes(version))


def open_claims(
    codec: StateCodec,
    token: str,
    *,
    now_ms: int,
    principal: str,
    digest: str,
    audience: str,
) -> Claims:
    """Unseal `token` and check every binding, fail-closed.

    Raises:
        InvalidRequestState: with the reason (log only) of the first failed check.
    """
    payload = codec.unseal(token)
    try:
        data = jsonrpc.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestState("payload not JSON") from exc
    if not isinstance(data, dict):
        raise InvalidRequestState("payload shape")
    try:
        _, data = formats.unstamped(Kind.REQUEST_STATE, data)
    except ValueError as exc:
        raise InvalidRequestState("payload version") from exc
    present = data.keys()
    if not (present >= _REQUIRED and present <= _KNOWN):
        raise InvalidRequestState("payload shape")
    for name, kind in _KNOWN_TYPES:
        if name not in data:
            continue
        if not isinstance(data[name], kind) or isinstance(data[name], bool):
            raise InvalidRequestState(f"claim {name} has the wrong type")
    claims = Claims(**data)
    check_binding(claims, now_ms=now_ms, principal=principal, digest=digest, audience=audience)
    return claims


class BoundState(Protocol):
    """What a sealed state is bound to (a call's round, an approval's)."""

    @property
    def audience(self) -> str: ...
    @property
    def expires_ms(self) -> int: ...
    @property
    def principal(self) -> str: ...
    @property
    def digest(self) -> str: ...


def check_binding(
    claims: BoundState, *, now_ms: int, principal: str, digest: str, audience: str
) -> None:
    """Fail-closed: the state was minted for this deployment and route, this caller and
    this request, and is still valid.

    Raises:
        InvalidRequestState: with the reason (log only) of the first failed check.
    """
    if claims.audience != audience:
        raise InvalidRequestState("audience mismatch")
    if now_ms >= claims.expires_ms:
        raise InvalidRequestState("expired")
    if claims.principal != principal:
        raise InvalidRequestState("principal mismatch")
    if claims.digest != digest:
        raise InvalidRequestState("request mismatch")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def request_digest(method: str, target: str | None, arguments: Any) -> str:
    """Digest of what a retry must repeat exactly: method, name or URI, arguments."""
    material = canonical_json([method, target, arguments if arguments is not None else {}])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


class RequestDigest:
    """A request's digest, worked out when first asked for: a call that never asks the
    client anything (most of them) never needs it."""

    __slots__ = ("_request", "_value")

    def __init__(self, method: str, target: str | None, arguments: Any) -> None:
        self._request: tuple[str, str | None, Any] | None = (method, target, arguments)
        self._value = ""

    @classmethod
    def known(cls, value: str) -> RequestDigest:
        """A digest already worked out (read from a record)."""
        digest = cls.__new__(cls)
        digest._request, digest._value = None, value
        return digest

    @property
    def value(self) -> str:
        if self._request is not None:
            self._value = request_digest(*self._request)
            self._request = None  # the arguments are not kept alive by a parked call
        return self._value


def principal_of(authorization: str | None) -> str:
    """The caller's identity for binding: a hash of its credentials, or anonymous."""
    if not authorization:
        return "anonymous"
    # The bytes that came: a header value that is no UTF-8 reaches here with each such
    # byte as a surrogate escape (how aiohttp decodes headers), which strict UTF-8 refuses.
    credentials = authorization.encode("utf-8", "surrogateescape")
    return "sha256:" + hashlib.sha256(credentials).hexdigest()[:32]


def log_salt(keys: Sequence[bytes]) -> bytes:
    """The secret that keys callers' log ids, derived from the sealing key (random for a
    process with none): a log line's id reveals nothing a guess of the credential can
    be checked against."""
    if not keys:
        return os.urandom(32)
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_LOG_INFO).derive(keys[0])


def log_id_of(principal: str, salt: bytes) -> str:
    """A caller's short id for logs: a keyed hash of its principal (`principal_of`)."""
    if principal == "anonymous":
        return principal
    return "p_" + hmac.new(salt, principal.encode(), hashlib.sha256).hexdigest()[:16]


def new_call_id() -> str:
    return secrets.token_urlsafe(16)  # 16 random bytes in base64url, unpadded


#: Between a call's first id and what a run of it again adds (no base64url character).
RERUN = "."


def rerun_id(call_id: str) -> str:
    """The id of a call run again (replayed after its owner died): a new one, which
    names the call it runs again (`first_id`), whatever runs it next."""
    return f"{first_id(call_id)}{RERUN}{_b64u(secrets.token_bytes(6))}"


def first_id(call_id: str) -> str:
    """The id a call had before any run of it again (`rerun_id`): the same across all."""
    return call_id.partition(RERUN)[0]
