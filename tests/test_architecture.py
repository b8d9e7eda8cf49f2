"""The protocol core stays sans-IO: no aiohttp, asyncio or redis anywhere in gateway/protocol."""

from __future__ import annotations

import ast
from pathlib import Path

PROTOCOL = Path(__file__).resolve().parents[1] / "gateway" / "protocol"
FORBIDDEN = {
    "aiohttp",
    "asyncio",
    "redis",
    "socket",
    "gateway.upstream",
    "gateway.store",
    "gateway.web",
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_protocol_core_imports_no_io() -> None:
    offenders = {
        f"{path.name}: {name}"
        for path in PROTOCOL.glob("*.py")
        for name in imported_modules(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    }
    assert offenders == set()
    assert len(list(PROTOCOL.glob("*.py"))) >= 8
