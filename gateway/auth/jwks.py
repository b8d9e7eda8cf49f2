"""One issuer's signing keys: parsed from its JWKS, cached, refreshed without hammering it.

`parse_jwks` keeps only signature keys it can pin an algorithm family to: RSA →
RS256/384/512 and PS256/384/512, EC → ES256/384/512 by curve, OKP (Ed25519, Ed448)
→ EdDSA. A key's own `alg`, when present, narrows that to one. Symmetric (`oct`)
keys, keys without `kid`, encryption keys, RSA keys under 2048 bits and keys that
publish private material are dropped, so HMAC can never be chosen for any key.

`JwksCache` policy, all on the injected wall clock:

- a known `kid` is answered from memory; a set older than `max_age_s` is refreshed
  on the next lookup when no refresh is running (so withdrawn keys stop working);
- an unknown `kid` triggers a refresh only if the last attempt (good or failed) is
  at least `refresh_interval_s` old, and waiters share that one fetch (a lock);
- a `kid` found absent is remembered for `refresh_interval_s` (bounded LRU), so
  it is refused without even taking the lock: a flood of random kids costs at
  most one fetch per interval;
- a failed fetch keeps the last good set; only a cache that never loaded a set
  answers `KeysUnavailable`.

A new key at the issuer is therefore accepted at most `refresh_interval_s` after a
token signed with it first arrives.
"""

from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from gateway.auth.discovery import discover_jwks_uri
from gateway.auth.ports import FetchError, HttpFetcher, WallClock

log = structlog.get_logger("gateway.auth")

RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
OKP_CURVES = frozenset({"Ed25519", "Ed448"})
#: Every algorithm a token may name; `none` and HS* are never among them.
ASYMMETRIC_ALGORITHMS = RSA_ALGORITHMS | frozenset(EC_ALGORITHMS.values()) | {"EdDSA"}
MIN_RSA_BITS = 2048
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})


@dataclass(frozen=True, slots=True)
class VerifyKey:
    kid: str
    kty: str
    algorithms: frozenset[str]
    public_key: Any  # a `cryptography` public key object


class UnknownKey(Exception):
    """The issuer does not publish this `kid` (or did not when last asked)."""


class KeysUnavailable(Exception):
    """No key set could ever be loaded from this issuer."""


def _family(jwk: Mapping[str, Any]) -> tuple[frozenset[str], Any]:
    """The algorithms `jwk` may verify and its public key. Raises ValueError to skip it."""
    kty = jwk.get("kty")
    for member in ("kty", "crv", "alg"):
        if member in jwk and not isinstance(jwk[member], str):
            raise ValueError(f"{member} is not a string")
    builder: Any
    if kty == "RSA":
        algorithms, builder = RSA_ALGORITHMS, RSAAlgorithm
    elif kty == "EC":
        alg = EC_ALGORITHMS.get(str(jwk.get("crv")))
        if alg is None:
            raise ValueError(f"EC curve {jwk.get('crv')!r} is not supported")
        algorithms, builder = frozenset({alg}), ECAlgorithm
    elif kty == "OKP":
        if jwk.get("crv") not in OKP_CURVES:
            raise ValueError(f"OKP curve {jwk.get('crv')!r} is not supported")
        algorithms, builder = frozenset({"EdDSA"}), OKPAlgorithm
    else:
        raise ValueError(f"key type {kty!r} is not accepted (asymmetric keys only)")
    alg = jwk.get("alg")
    if alg is not None:
        if alg not in algorithms:
            raise ValueError(f"alg {alg!r} does not fit key type {kty}")
        algorithms = frozenset({alg})
    try:
        key = builder.from_jwk(dict(jwk))
    except Exception as exc:  # noqa: BLE001 - PyJWT raises several kinds for bad material
        raise ValueError(f"unreadable {kty} key ({type(exc).__name__})") from exc
    if kty == "RSA" and key.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA key of {key.key_size} bits (at least {MIN_RSA_BITS} needed)")
    return algorithms, key


def parse_jwks(document: Any) -> tuple[dict[str, VerifyKey], list[str]]:
    """The usable keys of a JWKS by `kid`, and why each other entry was dropped.

    Raises:
        FetchError: the document is not a JWKS (`{"keys": [...]}`).
    """
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise FetchError('the JWKS is not a JSON object with a "keys" list')
    keys: dict[str, VerifyKey] = {}
    dropped: list[str] = []
    for index, jwk in enumerate(document["keys"]):
        if not isinstance(jwk, dict):
            dropped.append(f"keys[{index}]: not an object")
            continue
        kid = jwk.get("kid")
        name = f"keys[{index}] (kid {kid!r})"
        if not isinstance(kid, str) or not kid:
            dropped.append(f"keys[{index}]: no kid")
            continue
        if kid in keys:
            dropped.append(f"{name}: duplicate kid")
            continue
        if jwk.get("use", "sig") != "sig":
            dropped.append(f"{name}: use is not sig")
            continue
        ops = jwk.get("key_ops")
        if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
            dropped.append(f"{name}: key_ops lacks verify")
            continue
        if PRIVATE_MEMBERS & jwk.keys():
            dropped.append(f"{name}: publishes private or symmetric key material")
            continue
        try:
            algorithms, public_key = _family(jwk)
        except ValueError as exc:
            dropped.append(f"{name}: {exc}")
            continue
        keys[kid] = VerifyKey(kid, str(jwk["kty"]), algorithms, public_key)
    return keys, dropped


class JwksCache:
    """The signing keys of one issuer, from `jwks_url` or discovered through its metadata."""

    def __init__(
        self,
        *,
        issuer: str,
        fetcher: HttpFetcher,
        clock: WallClock,
        jwks_url: str | None = None,
        refresh_interval_s: float = 15.0,
        max_age_s: float = 300.0,
        max_negative: int = 1024,
    ) -> None:
        self.issuer = issuer
        self._fetcher = fetcher
        self._clock = clock
        self._configured_url = jwks_url
        self._jwks_url = jwks_url
        self.refresh_interval_s = refresh_interval_s
        self.max_age_s = max_age_s
        self._max_negative = max_negative
        self._keys: dict[str, VerifyKey] = {}
        self._loaded = False
        self._fetched_at = -math.inf
        self._attempted_at = -math.inf
        self._absent: OrderedDict[str, float] = OrderedDict()
        self._lock = asyncio.Lock()
        #: Refresh attempts made (metadata discovery plus JWKS fetch count as one).
        self.attempts = 0

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(self._keys)

    def _due(self, now: float) -> bool:
        return now - self._attempted_at >= self.refresh_interval_s

    async def key_for(self, kid: str) -> VerifyKey:
        """The key published as `kid`.

        Raises:
            UnknownKey: the issuer does not publish it (as of the last refresh).
            KeysUnavailable: no key set was ever loaded (the issuer is unreachable).
        """
        now = self._clock()
        key = self._keys.get(kid)
        if key is not None:
            stale = now - self._fetched_at >= self.max_age_s
            if stale and self._due(now) and not self._lock.locked():
                async with self._lock:
                    await self._refresh(now)
                key = self._keys.get(kid)
                if key is None:
                    raise UnknownKey("kid no longer published")
            return key
        seen = self._absent.get(kid)
        if seen is not None and now - seen < self.refresh_interval_s:
            raise UnknownKey("kid recently absent")
        async with self._lock:
            now = self._clock()
            if kid not in self._keys and self._due(now):
                await self._refresh(now)
            key = self._keys.get(kid)
            if key is not None:
                return key
            if not self._loaded:
                raise KeysUnavailable(f"no key set loaded from {self.issuer}")
            self._remember_absent(kid, now)
            raise UnknownKey("kid not published")

    def _remember_absent(self, kid: str, now: float) -> None:
        self._absent[kid] = now
        self._absent.move_to_end(kid)
        while len(self._absent) > self._max_negative:
            self._absent.popitem(last=False)

    async def refresh(self) -> bool:
        """Fetch now unless an attempt is under `refresh_interval_s` old; True if loaded.

        For startup priming; failures are logged, never raised.
        """
        async with self._lock:
            now = self._clock()
            if self._due(now):
                await self._refresh(now)
            return self._loaded

    async def _refresh(self, now: float) -> None:
        """Fetch the set once (the lock is held); on failure keep the last good one."""
        self._attempted_at = now
        self.attempts += 1
        try:
            if self._jwks_url is None:
                self._jwks_url = await discover_jwks_uri(self._fetcher, self.issuer)
            reply = await self._fetcher.get_json(self._jwks_url)
            if reply.status != 200:
                raise FetchError(f"{self._jwks_url}: status {reply.status}")
            keys, dropped = parse_jwks(reply.body)
            if not keys:
                raise FetchError(f"{self._jwks_url}: no usable signing key ({'; '.join(dropped)})")
        except FetchError as exc:
            # Discover again next time: the metadata may have moved the JWKS.
            self._jwks_url = self._configured_url
            log.warning(
                "jwks_refresh_failed", issuer=self.issuer, error=str(exc), kept=len(self._keys)
            )
            return
        if dropped:
            log.info("jwks_keys_dropped", issuer=self.issuer, dropped=dropped)
        added = sorted(keys.keys() - self._keys.keys())
        removed = sorted(self._keys.keys() - keys.keys())
        if added or removed:
            log.info("jwks_refreshed", issuer=self.issuer, added=added, removed=removed)
        self._keys = keys
        self._loaded = True
        self._fetched_at = now
        for kid in added:
            self._absent.pop(kid, None)
