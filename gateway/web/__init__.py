"""The aiohttp side facing 2026-07-28 clients: thin handlers, middlewares, response channels."""
