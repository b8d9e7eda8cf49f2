"""Where suspended calls are recorded: the interface, the embedded in-memory store, Redis."""
