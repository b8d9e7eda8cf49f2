"""Helpers shared by the tests: plain modules, neither tests nor fixtures.

- `wire`: 2026-07-28 requests and headers as a correct client sends them; SSE parsing.
- `inprocess`: a gateway config for tests and the in-process `Gateway` handle.
- `legacy`: the legacy test server's tools (tests/peers/legacy_server.py), through a
  gateway or asked directly (`LegacyClient`, `await_journal`).
- `cases`: the interactive tools every bridge must complete, and driving the mcp 2.x client.

Fixtures live in tests/conftest.py; processes in tests/peers/tooling.py.
"""
