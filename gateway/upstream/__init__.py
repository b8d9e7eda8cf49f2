"""The legacy-client side: the upstream port, its transports and the session pool."""
