"""The error tree drawn in `gateway/errors.py`'s docstring is the real one: every
`GatewayError` subclass defined anywhere in `gateway/` is drawn once, under its real
parent, with the HTTP status and JSON-RPC code its line states (where it states
one), and with its module named when it is not `gateway.errors`. A class added,
moved or removed without redrawing fails here, and so does a status or code changed
under the drawing."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

import pytest

import gateway
from gateway import errors
from gateway.errors import STATUS_FOR_CODE, GatewayError, RpcError, UpstreamError
from gateway.upstream.port import SessionExpired

#: Runs the command line when imported (`python -m gateway`); it defines no class.
NOT_IMPORTED = {"gateway.__main__"}

#: A line of the drawing: the branches (four characters a level), the class, its note.
LINE = re.compile(r"^(?P<branches>[│├└─ ]*)(?P<name>[A-Z]\w*)(?: +(?P<note>.*))?$")
#: What a note starts with: `-32603 / 502` (code and status), `-32603` or `503`.
NUMBERS = re.compile(r"^(?:(?P<code>-\d+)(?: / (?P<status>\d{3}))?|(?P<status_only>\d{3}))\b")
#: Where a class defined outside `gateway.errors` lives, named in its note.
MODULE = re.compile(r"\((gateway(?:\.\w+)+)\)")


@dataclass(frozen=True)
class Drawn:
    parent: str | None
    code: int | None = None
    status: int | None = None
    module: str = "gateway.errors"


def drawing(doc: str) -> dict[str, Drawn]:
    """The tree drawn in `doc`: from its `GatewayError` line to the first blank one."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "GatewayError")
    indent = len(lines[start]) - len(lines[start].lstrip())
    drawn: dict[str, Drawn] = {}
    ancestors: list[str] = []
    for line in lines[start:]:
        if not line.strip():
            break
        match = LINE.match(line[indent:])
        assert match is not None, f"not a line of the tree: {line!r}"
        depth, name = len(match["branches"]) // 4, match["name"]
        assert depth <= len(ancestors), f"{name} is drawn deeper than under its parent"
        assert name not in drawn, f"{name} is drawn twice"
        del ancestors[depth:]
        note = match["note"] or ""
        numbers = NUMBERS.match(note)
        code = status = None
        if numbers is not None:
            code = int(numbers["code"]) if numbers["code"] else None
            status = numbers["status"] or numbers["status_only"]
        module = MODULE.search(note)
        drawn[name] = Drawn(
            parent=ancestors[-1] if ancestors else None,
            code=code,
            status=int(status) if status else None,
            module=module[1] if module else "gateway.errors",
        )
        ancestors.append(name)
    return drawn


def defined_in_gateway() -> dict[str, type[GatewayError]]:
    """Every `GatewayError` class of `gateway/` (all its modules imported), by name."""
    for module in pkgutil.walk_packages(gateway.__path__, "gateway."):
        if module.name not in NOT_IMPORTED:
            importlib.import_module(module.name)
    found: dict[str, type[GatewayError]] = {"GatewayError": GatewayError}
    pending = [GatewayError]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__ == "gateway" or sub.__module__.startswith("gateway."):
                assert found.setdefault(sub.__name__, sub) is sub, f"two {sub.__name__}"
    return found


def status_of(cls: type[GatewayError]) -> int:
    """The status a class's errors are answered with, as `RpcError.status` reads it for
    JSON-RPC errors (the code's status, else the class's own)."""
    if issubclass(cls, RpcError):
        return STATUS_FOR_CODE.get(cls.code, cls.http_status)
    return cls.http_status


def differences(drawn: dict[str, Drawn], real: dict[str, type[GatewayError]]) -> list[str]:
    """What the drawing says that the classes do not, one sentence each."""
    found = [
        f"{name} ({real[name].__module__}) is not drawn" for name in real.keys() - drawn.keys()
    ]
    found += [
        f"{name} is drawn, but no class of gateway/ has its name"
        for name in drawn.keys() - real.keys()
    ]
    for name in real.keys() & drawn.keys():
        cls, line = real[name], drawn[name]
        parents = [base.__name__ for base in cls.__bases__ if issubclass(base, GatewayError)]
        if parents != ([line.parent] if line.parent else []):
            found.append(f"{name} is drawn under {line.parent}; it derives from {parents}")
        code = getattr(cls, "code", None)
        if line.code is not None and code != line.code:
            found.append(f"{name} is drawn with code {line.code}; it has {code}")
        if line.status is not None and status_of(cls) != line.status:
            found.append(f"{name} is drawn with status {line.status}; it has {status_of(cls)}")
        if cls.__module__ != line.module:
            found.append(f"{name} is drawn in {line.module}; it lives in {cls.__module__}")
    return sorted(found)


def test_the_drawn_error_tree_is_the_class_hierarchy() -> None:
    assert errors.__doc__ is not None
    untrue = differences(drawing(errors.__doc__), defined_in_gateway())
    assert not untrue, "redraw the tree in gateway/errors.py:\n" + "\n".join(untrue)


def test_every_module_of_the_gateway_is_searched_for_errors() -> None:
    real = defined_in_gateway()  # from gateway.errors, and from modules nothing here imports
    assert {"RoundInProgress", "SessionExpired", "ListensFull", "RateLimited"} <= real.keys()
    assert "UpstreamCredentialsError" in real and len(real) > 40


SMALL = """
    GatewayError
    └── RpcError                 a JSON-RPC error object
        └── UpstreamError        -32603 / 502, the legacy server failed us
            └── SessionExpired   -32603 / 502, gone upstream (gateway.upstream.port)
"""
REAL = {cls.__name__: cls for cls in (GatewayError, RpcError, UpstreamError, SessionExpired)}


def test_a_true_drawing_reads_as_the_classes() -> None:
    assert drawing(SMALL) == {
        "GatewayError": Drawn(None),
        "RpcError": Drawn("GatewayError"),
        "UpstreamError": Drawn("RpcError", -32603, 502),
        "SessionExpired": Drawn("UpstreamError", -32603, 502, "gateway.upstream.port"),
    }
    assert differences(drawing(SMALL), REAL) == []


@pytest.mark.parametrize(
    ("drawn", "problem"),
    [
        (
            SMALL.replace("            └── SessionExpired", "        └── SessionExpired"),
            "SessionExpired is drawn under RpcError; it derives from ['UpstreamError']",
        ),
        (
            "\n".join(line for line in SMALL.splitlines() if "SessionExpired" not in line),
            "SessionExpired (gateway.upstream.port) is not drawn",
        ),
        (
            SMALL.replace("    └── UpstreamError", "    ├── UpstreamError")
            + "        └── Ghost                503\n",
            "Ghost is drawn, but no class of gateway/ has its name",
        ),
        (
            SMALL.replace("-32603 / 502, gone", "-32603 / 503, gone"),
            "SessionExpired is drawn with status 503; it has 502",
        ),
        (SMALL.replace("-32603 / 502, gone", "-32602, gone"), "drawn with code -32602"),
        (
            SMALL.replace(" (gateway.upstream.port)", ""),
            "SessionExpired is drawn in gateway.errors; it lives in gateway.upstream.port",
        ),
    ],
    ids=["moved", "removed", "added", "status", "code", "module"],
)
def test_a_drawing_that_is_not_true_is_told_apart(drawn: str, problem: str) -> None:
    try:
        found = differences(drawing(drawn), REAL)
    except AssertionError as refused:  # a drawing that is no tree
        found = [str(refused)]
    assert any(problem in line for line in found), found
