"""Sans-IO protocol core: message shapes, validation and the 2026 <-> legacy conversions.

Nothing in this package awaits, opens sockets or talks to Redis; it takes dicts and
bytes and returns dicts, bytes and frozen dataclasses, so it is tested without an
event loop. An import-lint test keeps `aiohttp`, `asyncio` and `redis` out.
"""
