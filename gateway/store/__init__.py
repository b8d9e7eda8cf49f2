"""Where suspended calls are recorded: the interface, the embedded store, Redis (later)."""
