"""`gateway.http1` stands alone: it imports nothing of the gateway but itself, so it can
be lifted out, tested and reasoned about without the rest."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gateway" / "http1"


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (TYPE_CHECKING blocks and functions too),
    relative imports resolved against the package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x / from .framing import y
                base = ".".join(["gateway", "http1", *([base] if base else [])])
            found.add(base)
    return found


def test_the_client_imports_nothing_else_of_the_gateway() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert {p.name for p in modules} >= {"__init__.py", "client.py", "connection.py", "framing.py"}
    foreign = {
        f"{path.name}: {name}"
        for path in modules
        for name in imported_modules(path)
        if (name == "gateway" or name.startswith("gateway."))
        and not (name == "gateway.http1" or name.startswith("gateway.http1."))
    }
    assert foreign == set()


def test_the_import_check_sees_a_gateway_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import gateway.errors\nfrom gateway.protocol import sse\nfrom . import x\n")
    assert imported_modules(probe) == {"gateway.errors", "gateway.protocol", "gateway.http1"}
