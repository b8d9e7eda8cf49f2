"""The Streamable HTTP transport (2025-03-26 .. 2025-11-25): the wire, and sessions on it."""
