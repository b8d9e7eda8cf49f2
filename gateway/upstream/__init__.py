"""The gateway's legacy-client side: sessions with legacy MCP servers and their pool."""
