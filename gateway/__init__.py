"""mrtr-gateway: MCP 2026-07-28 clients in front, legacy MCP servers behind."""

__version__ = "0.2.0"
