"""API keys: made, stored as a hash only, loaded from a YAML file, checked in constant time.

A key is `mrtr_` + 32 random bytes in unpadded base64url (43 characters), sent as
`Authorization: Bearer <key>`. The prefix lets the authenticator route it here
rather than to the JWT verifier, and lets secret scanners recognise a leaked one.

The file stores `sha256:<hex>` of the whole key. A plain SHA-256 is enough
because keys carry 256 bits of randomness: there is no dictionary to try, so a
slow hash (scrypt, argon2) would only add CPU per request (a DoS lever) and a
pepper (HMAC) would add a second secret to manage without adding strength.
Every entry's digest is compared with `hmac.compare_digest`, without stopping at
the first match.

Keys file: a YAML list of `{id, hash, scopes}`; the id is the principal
(`key:<id>`). Loader errors name the file, the entry and the fix.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ConfigError

KEY_PREFIX = "mrtr_"
KEY_BYTES = 32
_KEY_RE = re.compile(r"mrtr_[A-Za-z0-9_-]{43}")
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}")
_SCOPE_RE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 scope-token (NQCHAR)
FIELDS = ("id", "hash", "scopes")


@dataclass(frozen=True, slots=True)
class ApiKeyEntry:
    id: str
    hash: str
    scopes: frozenset[str]


def looks_like_api_key(token: str) -> bool:
    """True if `token` claims to be an API key (by its prefix); the format is checked later."""
    return token.startswith(KEY_PREFIX)


def hash_key(key: str) -> str:
    """The stored form of `key`: `sha256:` and 64 lowercase hex digits."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_api_key(key_id: str, scopes: Iterable[str]) -> tuple[str, str]:
    """A fresh key and the YAML list entry that grants it `scopes` under `key_id`.

    The key is shown once (print it first); only the entry goes into the keys file.

    Raises:
        ConfigError: `key_id` or a scope is not well formed.
    """
    entry = {"id": key_id, "hash": "", "scopes": sorted(set(scopes))}
    key = KEY_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode().rstrip("=")
    entry["hash"] = hash_key(key)
    _entry(entry, "the new key")  # validates id and scopes with the loader's rules
    text = yaml.safe_dump([entry], sort_keys=False, default_flow_style=None)
    return key, text


def _entry(raw: Any, where: str) -> ApiKeyEntry:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping with id, hash and scopes")
    extra = sorted(set(map(str, raw)) - set(FIELDS))
    if extra:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(extra)}; allowed: id, hash, scopes"
        )
    key_id = raw.get("id")
    if not isinstance(key_id, str) or not _ID_RE.fullmatch(key_id):
        raise ConfigError(
            f"{where}: id must be 1-128 characters of letters, digits and ._@:- "
            "(starting with a letter or digit)"
        )
    where = f"{where} (id {key_id!r})"
    digest = raw.get("hash")
    if not isinstance(digest, str) or not _HASH_RE.fullmatch(digest):
        raise ConfigError(
            f"{where}: hash must be 'sha256:' and 64 lowercase hex digits; "
            f"make a key and its entry with: mrtr-gateway apikey --id {key_id} --scopes ..."
        )
    scopes = raw.get("scopes", [])
    if not isinstance(scopes, list) or not all(
        isinstance(s, str) and _SCOPE_RE.fullmatch(s) for s in scopes
    ):
        raise ConfigError(f"{where}: scopes must be a list of scope names without spaces")
    return ApiKeyEntry(key_id, digest, frozenset(scopes))


def parse_api_keys(data: Any, source: str = "keys file") -> list[ApiKeyEntry]:
    """Entries from parsed YAML (`None`, an empty file, means no keys).

    Raises:
        ConfigError: naming `source`, the entry (index and id) and what to fix.
    """
    if data is None:
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{source}: must be a YAML list of entries {{id, hash, scopes}}")
    entries = [_entry(raw, f"{source}: entry {index}") for index, raw in enumerate(data)]
    seen_ids: set[str] = set()
    seen_hashes: set[str] = set()
    for index, entry in enumerate(entries):
        if entry.id in seen_ids:
            raise ConfigError(f"{source}: entry {index}: id {entry.id!r} is used twice")
        if entry.hash in seen_hashes:
            raise ConfigError(
                f"{source}: entry {index} (id {entry.id!r}): the same key hash appears twice"
            )
        seen_ids.add(entry.id)
        seen_hashes.add(entry.hash)
    return entries


def load_api_keys(path: str | Path) -> list[ApiKeyEntry]:
    """Entries from the YAML keys file at `path`.

    Raises:
        ConfigError: unreadable file, YAML syntax, or a bad entry.
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"keys file {path}: cannot be read ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"keys file {path}: not valid YAML ({exc})") from exc
    return parse_api_keys(data, f"keys file {path}")


class ApiKeyStore:
    """The configured keys, by hash; answers which entry a presented key is."""

    def __init__(self, entries: Sequence[ApiKeyEntry]) -> None:
        self._entries = [(e, e.hash.encode()) for e in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, key: str) -> ApiKeyEntry | None:
        """The entry of `key`, or None if it is malformed or not configured."""
        if not _KEY_RE.fullmatch(key):
            return None
        presented = hash_key(key).encode()
        found: ApiKeyEntry | None = None
        for entry, digest in self._entries:
            # No early exit: the time taken does not depend on which entry matched.
            if hmac.compare_digest(presented, digest):
                found = entry
        return found
