"""The shape of `gateway/`, checked: no import cycles, modules of one concern each, a
sans-IO protocol core, a call core that depends on ports rather than on transports, and
one class per name.

A module over `LONG` lines is named in a warning, a hint to look whether it holds
more than one thing: shown in pytest's warnings summary, not turned into an error
(`filterwarnings` in pyproject.toml lets through the `UserWarning`s whose message
starts "Long module"). One over `MAX_LINES` fails. Neither number is a reason to
squeeze a module or its docstrings."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gateway"
LONG = 400
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """Every gateway module `path` imports, at any depth (TYPE_CHECKING blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from gateway.protocol import state` imports the module gateway.protocol.state
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    return {
        name: {m for m in imports_of(path) if m in MODULES and m != name}
        for name, path in MODULES.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in edges[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_anywhere_in_the_gateway() -> None:
    assert cycles(graph()) == []


def test_no_module_is_over_600_lines_and_those_over_400_are_named() -> None:
    sizes = {name: len(p.read_text().splitlines()) for name, p in MODULES.items()}
    for name, lines in sorted(sizes.items()):
        if LONG < lines <= MAX_LINES:
            message = f"Long module: {name} has {lines} lines (over {LONG}): one concern, or two?"
            warnings.warn(message, UserWarning, stacklevel=1)
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


#: The longest a function may be: one step each, read at once.
MAX_FUNCTION_LINES = 120


def long_functions(path: Path) -> dict[str, int]:
    """The functions of `path` over `MAX_FUNCTION_LINES`, by name, with their length."""
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }


def test_no_function_in_the_gateway_is_over_120_lines() -> None:
    found = {
        f"{name}.{f}": n for name, path in MODULES.items() for f, n in long_functions(path).items()
    }
    assert found == {}


def test_the_long_function_finder_finds_one(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    module = tmp_path / "m.py"
    module.write_text(f"def short():\n    return 1\n\n\nasync def long():\n{body}")
    assert long_functions(module) == {"long": MAX_FUNCTION_LINES + 1}


def offenders(prefix: str, forbidden: set[str]) -> set[str]:
    return {
        f"{name}: {imported}"
        for name, path in MODULES.items()
        if name == prefix or name.startswith(prefix + ".")
        for imported in imports_of(path)
        if any(imported == bad or imported.startswith(bad + ".") for bad in forbidden)
    }


def test_the_protocol_core_imports_no_io() -> None:
    forbidden = {"aiohttp", "asyncio", "redis", "socket", "gateway.upstream", "gateway.store"}
    forbidden |= {"gateway.web", "gateway.calls", "gateway.fleet", "gateway.config"}
    assert offenders("gateway.protocol", forbidden) == set()


#: The composition root: what builds the parts, which no part imports.
WIRING = {"gateway.app", "gateway.compose", "gateway.membership", "gateway.cli"}


def test_the_call_core_depends_on_ports_not_on_transports() -> None:
    forbidden = {
        "aiohttp",
        "redis",
        "gateway.upstream.http",
        "gateway.upstream.pool",
        "gateway.http1",
    }
    forbidden |= {"gateway.store.redis", "gateway.store.redis_client", "gateway.store.memory"}
    forbidden |= FLEET_TRANSPORTS | {"gateway.web", "gateway.legacy_clients"}
    forbidden |= WIRING
    assert offenders("gateway.calls", forbidden) == set()


#: The fleet's modules but its port and its messages (`FLEET_PORT`): how replicas reach
#: each other on Redis, which the call core and the legacy lane are handed, never import.
FLEET_PORT = {"gateway.fleet.port", "gateway.fleet.messages"}
FLEET_TRANSPORTS = {
    name for name in MODULES if name.startswith("gateway.fleet.") and name not in FLEET_PORT
}


def test_the_fleets_port_and_messages_do_no_io() -> None:
    """What the call core and the legacy lane may import of the fleet: sans-IO."""
    assert FLEET_TRANSPORTS >= {"gateway.fleet.redis_bus", "gateway.fleet.ledger"}
    forbidden = {"aiohttp", "asyncio", "redis", "socket", "gateway.upstream", "gateway.web"}
    forbidden |= {"gateway.calls", "gateway.legacy_clients", "gateway.tasks", "gateway.config"}
    forbidden |= FLEET_TRANSPORTS | {"gateway.store.redis", "gateway.store.redis_client"}
    for name in FLEET_PORT:
        assert offenders(name, forbidden) == set()


def test_the_legacy_lane_uses_web_independent_parts_only() -> None:
    """The legacy lane (2025 clients) is handed what it needs of the web part (the front
    door, stream hooks) and of the fleet (its bus, through the port); it knows neither
    the web part, nor the call core, nor the fleet's transport."""
    forbidden = {"gateway.web", "gateway.calls", "gateway.store"} | FLEET_TRANSPORTS
    forbidden |= WIRING | {"gateway.listens"}
    assert offenders("gateway.legacy_clients", forbidden) == set()


#: The transports behind the upstream port, and the concrete stores behind theirs.
TRANSPORTS = {
    "aiohttp",
    "redis",
    "gateway.http1",
    "gateway.upstream.http",
    "gateway.upstream.sse",
    "gateway.upstream.stdio",
    "gateway.upstream.pool",
    "gateway.upstream.factory",
}
STORES = {"gateway.store.redis", "gateway.store.redis_client", "gateway.store.memory"}


def test_tasks_run_on_the_call_core_and_the_ports() -> None:
    """The tasks extension (`gateway.tasks`) drives its calls through the call core and
    keeps its records through the task store's port: no transport, no web part, of the
    fleet only its port and messages (a task's messages to its owner go on that bus)."""
    forbidden = TRANSPORTS | STORES | FLEET_TRANSPORTS
    forbidden |= {"gateway.web", "gateway.legacy_clients", "gateway.listens"}
    forbidden |= WIRING
    assert offenders("gateway.tasks", forbidden) == set()


def test_listens_use_the_upstream_port_only() -> None:
    """A listen (`gateway.listens`) hears its upstream through the upstream port, and the
    fleet's news through a callback it is handed: no transport, no call core, no store."""
    forbidden = TRANSPORTS | {"gateway.store", "gateway.calls", "gateway.tasks", "gateway.fleet"}
    forbidden |= {"gateway.web", "gateway.legacy_clients"} | WIRING
    assert offenders("gateway.listens", forbidden) == set()


#: What of the audit trail records may import: the trail (`Audit`, `emit`) and the
#: schema. The sinks, the stream on Redis and the command are the wiring's business.
AUDIT_SINKS = {
    "gateway.audit.sinks",
    "gateway.audit.backlog",
    "gateway.audit.stream",
    "gateway.audit.build",
    "gateway.audit.tail",
    "gateway.audit.command",
}


def test_what_records_the_audit_trail_is_handed_it_and_knows_no_sink() -> None:
    for part in ("gateway.calls", "gateway.tasks", "gateway.legacy_clients", "gateway.web"):
        assert offenders(part, AUDIT_SINKS) == set()
    # The trail itself is no transport: it hands lines to sinks it is given.
    forbidden = {"aiohttp", "redis", "gateway.store", "gateway.fleet", "gateway.web"}
    assert offenders("gateway.audit.trail", forbidden | {"gateway.audit.stream"}) == set()


def test_the_rule_finder_names_a_forbidden_import() -> None:
    assert "gateway.tasks.service: gateway.store.tasks" in offenders(
        "gateway.tasks", {"gateway.store"}
    )


def test_checking_a_config_loads_no_transport() -> None:
    forbidden = {"aiohttp", "redis", "gateway.upstream", "gateway.calls", "gateway.web"}
    assert offenders("gateway.config", forbidden) == set()


def test_the_folders_name_the_parts() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders >= {
        "protocol",
        "calls",
        "upstream",
        "store",
        "fleet",
        "web",
        "legacy_clients",
        "tasks",
    }
    for folder in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        assert doc, f"gateway/{folder}/__init__.py says what the part is"


def classes_defined_twice(paths: list[Path]) -> dict[str, list[str]]:
    """Class names defined more than once (at any depth) across `paths`, each with
    where: one name, one meaning."""
    where: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                where.setdefault(node.name, []).append(f"{shown}:{node.lineno}")
    return {name: places for name, places in where.items() if len(places) > 1}


def test_no_two_classes_in_the_gateway_share_a_name() -> None:
    assert classes_defined_twice(sorted(MODULES.values())) == {}


def test_the_twin_finder_finds_a_class_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Event:\n    pass\n\n\nclass Once:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Event:\n        pass\n")
    twins = classes_defined_twice([tmp_path / "a.py", tmp_path / "b.py"])
    assert twins == {"Event": ["a.py:1", "b.py:2"]}


def private_reads(path: Path) -> list[str]:
    """Reads of a private attribute (`x._name`) off anything but `self` or `cls`, where
    the module itself defines no attribute of that name (its own class's peers may read
    each other's): a library's private field, which any release may rename."""
    tree = ast.parse(path.read_text())
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            own.update(
                e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and e.value
            )
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or isinstance(node.ctx, ast.Store):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in own:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_private_attribute_of_a_library_is_touched() -> None:
    assert [hit for p in MODULES.values() for hit in private_reads(p)] == []


def test_the_private_read_finder_finds_one(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "class A:\n    __slots__ = ('_mine',)\n\n"
        "    def f(self, other, hist):\n"
        "        return other._mine, hist._upper_bounds, self._anything\n"
    )
    assert [h.split(": ", 1)[1] for h in private_reads(module)] == ["hist._upper_bounds"]


#: What a part of the fleet is called where it is handed: asked `is None` of, it asks
#: whether there is a fleet, which a replica alone (a fleet of one, `gateway.fleet.single`)
#: answers by itself (`gateway.membership`, `gateway.calls.replicas`).
FLEET_NAMES = frozenset(
    {"bus", "fleet", "routing", "outcomes", "ledger", "changes", "owner_side", "remote"}
    | {"alive", "written_back", "lease_term", "withdraw", "redis"}
)
#: None left (the legacy lane asks its remote for the owner, which a replica alone answers
#: with None: no other replica's session can be reached).
FLEET_QUESTIONS_LEFT: set[str] = set()


def fleet_questions(path: Path) -> set[str]:
    """`x is None` / `x is not None` where `x` names a part of the fleet."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ast.Is | ast.IsNot):
            continue
        left, right = node.left, node.comparators[0]
        name = left.attr if isinstance(left, ast.Attribute) else getattr(left, "id", None)
        if name in FLEET_NAMES and isinstance(right, ast.Constant) and right.value is None:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
            found.add(f"{where}: {ast.unparse(node)}")
    return found


def test_nothing_outside_the_fleet_asks_whether_there_is_a_fleet() -> None:
    asked = {
        question
        for name, path in MODULES.items()
        if not name.startswith("gateway.fleet")
        for question in fleet_questions(path)
    }
    assert asked == FLEET_QUESTIONS_LEFT


def test_the_fleet_question_finder_finds_one(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(self, bus, x):\n    return self.bus is None or x is None\n")
    assert fleet_questions(module) == {"m.py: self.bus is None"}
