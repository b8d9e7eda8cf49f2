"""Structured logging, configured once: JSON lines for machines, console for humans.

Events are snake_case with key/values; `request_id`, `call_id` and `upstream`
are bound with `bind` (a context variable of this module). Never log
requestState, tokens or keys.

The shipped default (`auto`) writes JSON lines unless stderr is a terminal: a
container's log pipe gets the cheap format. JSON is serialised by orjson and
written as bytes; disabled levels cost one method call (the bound logger is
built for the level). At `info`, a request is one line (`request_served`).
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import IO, Any

import orjson
import structlog
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import RequestPayloadError
from structlog.typing import EventDict

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

FORMATS = ("auto", "console", "json")

#: The level a logger method writes, where the two differ (as `add_log_level` names them).
_LEVEL_NAMES = {"exception": "error", "warn": "warning"}


def resolve_format(fmt: str, stream: IO[str] | None = None) -> str:
    """`auto` is `console` on a terminal and `json` everywhere else."""
    if fmt != "auto":
        return fmt
    stream = stream or sys.stderr
    return "console" if stream.isatty() else "json"


#: What every log line of the current request or task carries (`request_id`, `call_id`,
#: ...): one context variable holding a dict that is replaced, never changed in place, so
#: a task started with a copy of the context keeps what was bound when it started and
#: what it binds stays its own. structlog's own context keeps a variable per key, which
#: costs a walk over the whole context to merge or clear at every line and request.
_BOUND: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "log_context", default=MappingProxyType({})
)


def bind(**values: Any) -> None:
    """Add `values` to every later log line of this request (or task and its children)."""
    _BOUND.set({**_BOUND.get(), **values})


def begin(**values: Any) -> None:
    """Start a request's context: `values`, and nothing bound before it (one step for
    `clear` then `bind`, on every request)."""
    _BOUND.set(values)


def unbind(*keys: str) -> None:
    bound = _BOUND.get()
    _BOUND.set({k: v for k, v in bound.items() if k not in keys})


def bound(key: str) -> Any:
    """What is bound under `key` for this request (None when nothing is)."""
    return _BOUND.get().get(key)


def clear() -> None:
    """Forget what was bound: a new request starts bare."""
    _BOUND.set({})


def merge_bound(_logger: object, _method_name: str, event_dict: EventDict) -> EventDict:
    """The processor that adds what was bound (a line's own keys win)."""
    bound = _BOUND.get()
    if event_dict.keys().isdisjoint(bound):  # nearly every line: added as they come, in C
        event_dict.update(bound)
        return event_dict
    for key, value in bound.items():
        event_dict.setdefault(key, value)
    return event_dict


def _json_line(_logger: object, method_name: str, event_dict: EventDict) -> bytes:
    """The JSON format's processors after the context, in one step: the level, the time
    (ISO 8601, UTC, `Z`) and a traceback rendered as text when there is one, then
    orjson. What it writes is what `add_log_level`, `TimeStamper(fmt="iso", utc=True)`,
    `format_exc_info` and `JSONRenderer` would, for a fraction of their cost per line."""
    event_dict["level"] = _LEVEL_NAMES.get(method_name, method_name)
    event_dict["timestamp"] = datetime.datetime.now(datetime.UTC)
    if "exc_info" in event_dict:
        event_dict = structlog.processors.format_exc_info(_logger, method_name, event_dict)
    return orjson.dumps(event_dict, default=repr, option=orjson.OPT_UTC_Z)


#: What a console line shows first after its time, level and event: what a person scans
#: a column for (how the request ended, how long it took, what it named).
CONSOLE_LEAD = ("status", "outcome", "duration_ms", "tool", "prompt", "resource", "rpc_method")


def console_order(_logger: object, _method_name: str, event_dict: EventDict) -> EventDict:
    """The console format's key order: the time, level and event (the renderer puts them
    first), then `CONSOLE_LEAD`'s keys, then the others alphabetically."""
    lead = {key: event_dict.pop(key) for key in CONSOLE_LEAD if key in event_dict}
    return {**lead, **dict(sorted(event_dict.items()))}


def _chain(fmt: str) -> tuple[list[structlog.types.Processor], Any]:
    """The processors and the logger factory of format `fmt` (`auto` resolved here)."""
    if resolve_format(fmt) == "json":
        return [merge_bound, _json_line], structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    processors: list[structlog.types.Processor] = [
        merge_bound,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        console_order,
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), sort_keys=False),
    ]
    return processors, structlog.PrintLoggerFactory(file=sys.stderr)


def refused(reason: str, fmt: str) -> None:
    """One `gateway_refused` error line in format `fmt`, written without configuring
    logging: what was refused may be the configuration that says how to log."""
    processors, factory = _chain(fmt if fmt in FORMATS else "auto")
    logger = structlog.wrap_logger(
        factory(),
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
    )
    logger.error("gateway_refused", reason=reason)


def announce(event: str, **values: Any) -> None:
    """An info line written whatever `logging.level` says, in the configured format: where
    the gateway serves (the start-up banner it replaces was always shown, and a process
    that starts the gateway waits for it)."""
    config = structlog.get_config()
    logger = structlog.wrap_logger(
        config["logger_factory"](),
        processors=config["processors"],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    )
    logger.info(event, **values)


def configure(level: str = "info", fmt: str = "auto") -> None:
    processors, factory = _chain(fmt)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    # The libraries' own records (asyncio's "never retrieved", aiohttp's server errors)
    # become log lines of the same format: nothing else reaches the log stream.
    root = logging.getLogger()
    root.setLevel(max(_LEVELS[level], logging.WARNING))
    if not any(isinstance(h, LibraryRecords) for h in root.handlers):
        root.addHandler(LibraryRecords())
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in server_log.filters):
        server_log.addFilter(MalformedRequests())


class LibraryRecords(logging.Handler):
    """A standard-library log record as one `library_log` line of the configured format:
    its `logger`, level, `message` and, when it has one, its traceback (in JSON, a
    string inside the line)."""

    def emit(self, record: logging.LogRecord) -> None:
        extra: dict[str, Any] = {"exc_info": record.exc_info} if record.exc_info else {}
        structlog.get_logger("gateway.library").log(
            record.levelno,
            "library_log",
            logger=record.name,
            message=record.getMessage(),
            **extra,
        )


class MalformedRequests(logging.Filter):
    """aiohttp logs a request it could not parse as an error with its traceback: a client's
    mistake, not the gateway's, and a way for anyone to flood the log. Such a record
    becomes one `request_malformed` line (the exception's kind and the status answered;
    nothing of the request itself, which may hold a credential); any other record of
    aiohttp's server passes as it is.

    Two records are a client's mistake: a request it could not parse (`HttpProcessingError`,
    answered with its status), and a body it could not decode (`RequestPayloadError`: a
    compression that fails, found as aiohttp drains the body after the answer, whatever
    that was; its cause, the parser's error, is named as the kind, with `part=body`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RequestPayloadError):
            cause = exc.__cause__
            kind = type(cause if isinstance(cause, HttpProcessingError) else exc).__name__
            structlog.get_logger("gateway.web").info("request_malformed", kind=kind, part="body")
            return False
        if not isinstance(exc, HttpProcessingError):
            return True
        structlog.get_logger("gateway.web").info(
            "request_malformed", kind=type(exc).__name__, status=exc.code
        )
        return False
