"""The previous release (tests/rollout/PREVIOUS_RELEASE): its version, its commit, and the
python of a venv holding it (built on first use, cached under the peers directory)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.peers.tooling import ensure_release

FILE = Path(__file__).resolve().parent / "PREVIOUS_RELEASE"


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    commit: str

    def python(self) -> Path:
        return ensure_release(self.version, self.commit)


def previous() -> Release:
    fields: dict[str, str] = {}
    for line in FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            fields[key.strip()] = value.strip()
    return Release(fields["version"], fields["commit"])
