"""docs/configuration.md is the configuration dataclasses written out: it cannot drift.

Each key's type and default come from its field, its meaning from the field's docstring;
a field added without one stops the generation, naming it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import GatewayConfig
from gateway.config.reference import (
    COMMAND,
    UndocumentedField,
    attribute_docs,
    render,
    sections,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_reference_in_docs_is_the_one_the_dataclasses_give() -> None:
    written = REFERENCE.read_text()
    assert written == render(), (
        f"docs/configuration.md differs from the configuration dataclasses; run: {COMMAND}"
    )


def test_the_command_writes_the_reference() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway.config.reference"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    ).stdout
    assert out == render()


def test_every_section_and_key_of_the_file_is_there_with_its_default() -> None:
    by_path = {section.path: {key.key: key for key in section.keys} for section in sections()}
    assert list(by_path)[:4] == ["", "listen", "limits", "limits.rate.per_principal"]
    assert {"upstreams[].pool", "upstreams[].tools.<name>", "upstreams[].inputs[]"} <= set(by_path)
    assert by_path["upstreams[].pool"]["max_sessions"].default == "64"
    assert by_path["limits"]["max_body_bytes"].default == "4194304"
    assert by_path["sealing"]["keys_file"].type == "path"
    assert by_path["upstreams[]"]["name"].default == "required"
    assert by_path[""]["upstreams[]"].default == "—"
    assert by_path["upstreams[]"]["resources.<uri>"].type == "mapping of uris to sections"
    assert "where" not in by_path["upstreams[].oauth_client"]  # not read from the file


def test_every_default_shown_is_the_dataclass_default() -> None:
    limits = {key.key: key.default for key in sections()[2].keys}
    for field in dataclasses.fields(GatewayConfig().limits):
        if field.name != "rate_per_principal":
            default = field.default
            shown = str(int(default)) if isinstance(default, float) else str(default)
            assert limits[field.name] == shown


def test_a_field_without_a_docstring_stops_the_generation_naming_it() -> None:
    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        said: int = 1
        """What it means."""
        forgotten: str = "x"

    from gateway.config import reference

    assert attribute_docs(Undocumented) == {"said": "What it means."}
    with pytest.raises(UndocumentedField, match=r"Undocumented\.forgotten has no docstring"):
        list(reference._walk(Undocumented, "", "t", {}))
