"""The MCP protocol revisions the gateway knows, as an enumerated registry.

Revisions are a set, not an ordered scalar: what the gateway serves to clients (2026
clients, and 2025 clients on the legacy lane) and what it speaks to legacy servers are
lists drawn from it.
"""

from __future__ import annotations

from enum import StrEnum


class Version(StrEnum):
    V2024_11_05 = "2024-11-05"
    V2025_03_26 = "2025-03-26"
    V2025_06_18 = "2025-06-18"
    V2025_11_25 = "2025-11-25"
    V2026_07_28 = "2026-07-28"

    @classmethod
    def parse(cls, value: object) -> Version | None:
        """The known revision named by `value`, or None for anything else."""
        return _BY_VALUE.get(value) if isinstance(value, str) else None


#: Each revision by its name: read on every request, and an enum's own lookup by value
#: (`Version(text)`) runs several Python calls where this is one lookup.
_BY_VALUE: dict[str, Version] = {v.value: v for v in Version}

#: What the gateway serves to clients (the front side).
FRONT_VERSIONS: tuple[Version, ...] = (Version.V2026_07_28,)

#: The initialize-based revisions whose clients the legacy lane serves over Streamable
#: HTTP, newest first (their upstream negotiates the one a session speaks).
LEGACY_FRONT_VERSIONS: tuple[Version, ...] = (
    Version.V2025_11_25,
    Version.V2025_06_18,
    Version.V2025_03_26,
)

#: Every revision of the initialize era: a claim or header naming one is a legacy client's
#: (2024-11-05 included: a client may still ask for it in its `initialize`).
LEGACY_ERA: frozenset[Version] = frozenset(
    {Version.V2024_11_05, Version.V2025_03_26, Version.V2025_06_18, Version.V2025_11_25}
)

#: What the gateway speaks to legacy servers, newest first; the first is proposed.
UPSTREAM_VERSIONS: tuple[Version, ...] = (
    Version.V2025_11_25,
    Version.V2025_06_18,
    Version.V2025_03_26,
)


def front_supported(*, legacy: bool = False) -> list[str]:
    """The revisions served to clients; `legacy`: the legacy lane's too (`server/discover`
    while the lane serves the route)."""
    versions = FRONT_VERSIONS + LEGACY_FRONT_VERSIONS if legacy else FRONT_VERSIONS
    return [v.value for v in versions]
