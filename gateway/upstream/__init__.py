"""The legacy-client side: the upstream port, its transports (Streamable HTTP) and the session pool."""
