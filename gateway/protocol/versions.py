"""The MCP protocol revisions the gateway knows, as an enumerated registry.

Revisions are a set with an era each, not an ordered scalar: "modern" revisions
carry their envelope on every request, "legacy" ones negotiate with `initialize`.
"""

from __future__ import annotations

from enum import Enum, StrEnum


class Era(Enum):
    LEGACY = "legacy"
    MODERN = "modern"


class Version(StrEnum):
    V2024_11_05 = "2024-11-05"
    V2025_03_26 = "2025-03-26"
    V2025_06_18 = "2025-06-18"
    V2025_11_25 = "2025-11-25"
    V2026_07_28 = "2026-07-28"

    @property
    def era(self) -> Era:
        return Era.MODERN if self is Version.V2026_07_28 else Era.LEGACY

    @classmethod
    def parse(cls, value: object) -> Version | None:
        """The known revision named by `value`, or None for anything else."""
        if not isinstance(value, str):
            return None
        try:
            return cls(value)
        except ValueError:
            return None


#: What the gateway serves to clients (the front side).
FRONT_VERSIONS: tuple[Version, ...] = (Version.V2026_07_28,)

#: What the gateway speaks to legacy servers, newest first; the first is proposed.
UPSTREAM_VERSIONS: tuple[Version, ...] = (
    Version.V2025_11_25,
    Version.V2025_06_18,
    Version.V2025_03_26,
)


def front_supported() -> list[str]:
    return [v.value for v in FRONT_VERSIONS]
