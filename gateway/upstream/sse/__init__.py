"""The HTTP+SSE transport of protocol 2024-11-05: one SSE connection is one session."""
