"""Structured logging, configured once: JSON lines for machines, console for humans.

Events are snake_case with key/values; `request_id`, `call_id` and `upstream`
are bound through `structlog.contextvars`. Never log requestState, tokens or keys.

The shipped default (`auto`) writes JSON lines unless stderr is a terminal: a
container's log pipe gets the cheap format. JSON is serialised by orjson and
written as bytes; disabled levels cost one method call (the bound logger is
built for the level). At `info`, a request is one line (`request_served`).
"""

from __future__ import annotations

import logging
import sys
from typing import IO

import orjson
import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

FORMATS = ("auto", "console", "json")


def resolve_format(fmt: str, stream: IO[str] | None = None) -> str:
    """`auto` is `console` on a terminal and `json` everywhere else."""
    if fmt != "auto":
        return fmt
    stream = stream or sys.stderr
    return "console" if stream.isatty() else "json"


def _json_bytes(obj: object, **_: object) -> bytes:
    return orjson.dumps(obj, default=repr)


def configure(level: str = "info", fmt: str = "auto") -> None:
    fmt = resolve_format(fmt)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    processors: list[structlog.types.Processor]
    factory: structlog.types.WrappedLogger
    if fmt == "json":
        processors = [
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_json_bytes),
        ]
        factory = structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    else:
        processors = [
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
        ]
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(_LEVELS[level], logging.WARNING), stream=sys.stderr)
