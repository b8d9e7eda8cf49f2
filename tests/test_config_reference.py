"""docs/configuration.md is the configuration dataclasses written out: it cannot drift.

Each key's type and default come from its field, its meaning from the field's docstring;
a field added without one stops the generation, naming it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.config.reference import (
    COMMAND,
    UndocumentedField,
    attribute_docs,
    render,
    sections,
)
from gateway.errors import ConfigError

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


#: What a section needs besides the key under test for the loader to read on to it.
BASES: dict[str, dict[str, Any]] = {
    "auth": {"public_url": "https://mcp.example.com"},
    "auth.oauth": {"issuer": "https://login.example.com"},
    "upstreams[]": {"name": "u", "url": "http://127.0.0.1:9/mcp"},
    "upstreams[].oauth_client": {
        "token_url": "https://login.example.com/token",
        "client_id": "c",
        "client_secret_env": "SECRET",
    },
    "upstreams[].inputs[]": {"key": "k"},
    "endpoints[]": {"path": "/e", "upstreams": ["u"]},
}


def _placed(path: str, key: str, value: Any) -> dict[str, Any]:
    """A file with `key: value` in the section at `path`, and around it what each
    enclosing section needs for the loader to read on to it (`BASES`)."""
    parts = path.split(".") if path else []
    inner: dict[str, Any] = {**BASES.get(path, {}), key: value}
    if (path, key) == ("upstreams[]", "command"):
        inner = {"name": "u", key: value}  # a stdio upstream has no url
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        if part.endswith("[]"):
            wrapped: dict[str, Any] = {part[:-2]: [inner]}
        elif part.startswith("<"):
            wrapped = {"t": inner}  # a tool's name
        else:
            wrapped = {part: inner}
        inner = {**BASES.get(".".join(parts[:i]), {}), **wrapped}
    inner.setdefault("upstreams", [BASES["upstreams[]"]])
    if path == "upstreams[].tools.<name>" and key == "scopes":
        inner["auth"] = {**BASES["auth"], "oauth": BASES["auth.oauth"]}  # scopes need it
    return inner


def _concrete(path: str) -> str:
    return path.replace("[]", "[0]").replace("<name>", "t")


def test_the_loader_reads_every_key_the_reference_names() -> None:
    """Each key written with a value of the wrong kind is refused by its own key path, not
    as an unknown key: the file and the reference speak of the same keys."""
    unread = []
    for section in sections():
        for key in section.keys:
            if "section" in key.type or " / " in key.key:
                continue
            wrong: Any = {"a": 1} if key.type.startswith("list") else [1, 2]
            data = _placed(section.path, key.key, wrong)
            where = ".".join(p for p in (_concrete(section.path), key.key) if p)
            try:
                parse_config(data, env={"SECRET": "s"})
            except ConfigError as exc:
                said = [p for p in exc.problems if p.startswith(f"{where}: ")]
                if said and "unknown key" not in said[0]:
                    continue
                unread.append((where, exc.problems))
                continue
            unread.append((where, "accepted"))
    assert unread == []
