"""Who is calling: the principal and the identity the authenticator hands to the gateway.

A principal is `(issuer, subject, client)` for an access token (the client is its
`azp` or `client_id`, when it has one) and the key's id for an API key, so a
refreshed token of the same subject and client is the same principal (binding to
a hash of the raw token would break every parked call at each refresh), while
another application acting for the same user is not.

`Principal.key` is the stable string sealed into requestState and used to key
limits: `jwt:<iss>|<sub>`, `jwt:<iss>|<sub>|<client>`, `key:<id>`, or `anonymous`.
Issuers never contain `|` (`require_secure_url` refuses it), and `%` and `|` in a
subject or client are escaped, so the parts split unambiguously.
Logs never carry a key: they carry `state.log_id_of(key, salt)`, a hash keyed by a
secret derived from the sealing key, so a subject (often an email) cannot be
guessed and checked against a log line.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["jwt", "key", "anonymous"]


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Kind
    #: The token's `iss` for kind "jwt"; empty otherwise.
    issuer: str
    #: The token's `sub` for kind "jwt", the key id for kind "key".
    subject: str
    #: The token's `azp` or `client_id` for kind "jwt", when it has one; empty otherwise.
    client: str = ""

    @classmethod
    def for_token(cls, issuer: str, subject: str, client: str = "") -> Principal:
        return cls("jwt", issuer, subject, client)

    @classmethod
    def for_api_key(cls, key_id: str) -> Principal:
        return cls("key", "", key_id)

    @classmethod
    def anonymous(cls) -> Principal:
        return cls("anonymous", "", "")

    @property
    def key(self) -> str:
        """The stable form: for requestState bindings and rate-limit keys."""
        if self.kind == "jwt":
            if self.client:
                return f"jwt:{self.issuer}|{_escaped(self.subject)}|{_escaped(self.client)}"
            return f"jwt:{self.issuer}|{_escaped(self.subject)}"
        if self.kind == "key":
            return f"key:{self.subject}"
        return "anonymous"


def parsed(key: str) -> Principal | None:
    """The principal whose `key` this is (`jwt:...`, `key:...`, `anonymous`); None for
    another form (no `auth`: a hash of a credential, which names no one)."""
    if key == "anonymous":
        return Principal.anonymous()
    if key.startswith("key:"):
        return Principal.for_api_key(key[4:])
    if key.startswith("jwt:"):
        parts = key[4:].split("|")
        if len(parts) in (2, 3):
            return Principal.for_token(*(_unescaped(p) for p in parts))
    return None


def _unescaped(part: str) -> str:
    return part.replace("%7C", "|").replace("%25", "%")


def _escaped(part: str) -> str:
    """`part` with `%` and `|` escaped: a subject's `|` cannot pass for the client's."""
    if "%" not in part and "|" not in part:
        return part
    return part.replace("%", "%25").replace("|", "%7C")


@dataclass(frozen=True, slots=True)
class Identity:
    """A caller the gateway has authenticated, with the scopes its credential grants.

    `client_id` is the token's `azp` or `client_id`, when present (also in the
    principal, so another application's token resumes none of this one's calls).
    """

    principal: Principal
    scopes: frozenset[str] = field(default_factory=frozenset)
    client_id: str | None = None
    #: When the credential stops being valid (a token's `exp`, seconds since the epoch);
    #: None for one that does not expire (an API key). What outlives the request that
    #: showed it (a listen stream) ends then.
    expires_at: float | None = None

    @property
    def kind(self) -> Kind:
        return self.principal.kind

    @classmethod
    def anonymous(cls) -> Identity:
        """The caller on a route configured without authentication."""
        return cls(Principal.anonymous())

    def lacks(self, needed: Iterable[str]) -> frozenset[str]:
        """The scopes of `needed` this identity does not hold."""
        return frozenset(needed) - self.scopes
