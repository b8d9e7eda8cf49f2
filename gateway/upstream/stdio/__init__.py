"""The stdio transport: a legacy server as a child process, one process per session."""
