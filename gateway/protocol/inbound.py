"""The 2026-07-28 front door, sans-IO: HTTP checks and the request validation ladder.

`check_http` decides the HTTP-level refusals (405, 406, 415, 403); `classify`
runs the ladder over a decoded body and returns a `FrontRequest` with its
per-request envelope, or raises the exact error of the spec's table (§6.5).
Rungs, first failure wins: envelope shape (-32600) -> routing headers present
once (-32020) -> `_meta` carries the required keys (-32602) -> headers mirror
the body (-32020) -> version supported (-32022) -> method known (-32601) ->
method params well-formed (-32602).
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gateway.errors import (
    ForbiddenOrigin,
    HeaderMismatch,
    InvalidParams,
    InvalidRequest,
    MethodNotAllowed,
    MethodNotFound,
    NotAcceptable,
    UnsupportedMediaType,
    UnsupportedProtocolVersion,
)
from gateway.immutable import immutable
from gateway.protocol import jsonrpc, methods, tasks
from gateway.protocol.capabilities import ClientCaps
from gateway.protocol.methods import NAME_FIELD
from gateway.protocol.versions import FRONT_VERSIONS, Version, front_supported

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"

VERSION_HEADER = "mcp-protocol-version"
METHOD_HEADER = "mcp-method"
NAME_HEADER = "mcp-name"
ROUTING_HEADERS = frozenset({VERSION_HEADER, METHOD_HEADER, NAME_HEADER})

#: What a log line calls the target of each method that has one.
_TARGET_LOG_KEY = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}
#: A target is the client's text: a log line carries this much of it at most.
TARGET_LOG_CHARS = 200


def logged_target(method: str, params: Any) -> dict[str, str]:
    """The tool, prompt or resource a request names, as a log line's key and value
    (`{"tool": "create_ticket"}`), its value cut at `TARGET_LOG_CHARS`; `{}` for others."""
    key = _TARGET_LOG_KEY.get(method)
    value = params.get(NAME_FIELD[method]) if key and isinstance(params, dict) else None
    return {key: value[:TARGET_LOG_CHARS]} if key and isinstance(value, str) else {}


#: The tasks extension's methods mirror `params.taskId` into `Mcp-Name`, so that a
#: balancer can route by it; it is checked as the core's names are (their params are
#: read after the extension's gate).
TASK_NAME_FIELD = "taskId"

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

_SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$")
_VISIBLE_ASCII = re.compile(r"^[\x20-\x7e]*$")


@immutable
class Envelope:
    """The per-request protocol fields of `params._meta`."""

    protocol_version: Version
    capabilities: ClientCaps
    log_level: str | None
    progress_token: str | int | None
    #: The request declared the tasks extension (`io.modelcontextprotocol/tasks`).
    tasks: bool = False


@immutable
class FrontRequest:
    id: jsonrpc.RequestId
    method: str
    params: dict[str, Any]
    envelope: Envelope
    # W3C trace context (traceparent, tracestate, baggage) from `_meta` or the HTTP headers
    trace: Mapping[str, str] = field(default_factory=dict)
    #: The tool or prompt name, or the resource URI, of an interruptible request.
    target: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        member = NAME_FIELD.get(self.method)
        value = self.params.get(member) if member else None
        object.__setattr__(self, "target", value if isinstance(value, str) else None)


TRACE_KEYS = ("traceparent", "tracestate", "baggage")


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_TRACE_VALUE = re.compile(r"^[\x20-\x7e]{1,512}$")


def _valid_trace(key: str, value: Any) -> bool:
    if not isinstance(value, str) or not _TRACE_VALUE.fullmatch(value):
        return False
    return key != "traceparent" or bool(_TRACEPARENT.fullmatch(value))


def trace_context(meta: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, str]:
    """Trace context for the upstream: `_meta`'s own keys first, else the HTTP headers'.

    Values that are not valid W3C trace context are dropped (as a tracer would): they
    must never reach an upstream header.
    """
    if meta.keys().isdisjoint(TRACE_KEYS) and headers.keys().isdisjoint(TRACE_KEYS):
        return {}  # nearly every request: no comprehension run for nothing
    trace = {k: meta[k] for k in TRACE_KEYS if k in meta and _valid_trace(k, meta[k])}
    return trace or {
        k: headers[k] for k in TRACE_KEYS if k in headers and _valid_trace(k, headers[k])
    }


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def _host_name(host: str) -> str:
    """`Host` header without its port: `[::1]:80` -> `[::1]`, `a.b:80` -> `a.b`."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True, slots=True)
class OriginPolicy:
    """Which `Host` and `Origin` values are served (DNS-rebinding and CSRF protection).

    A gateway listening on loopback serves only loopback `Host` names and loopback
    origins (plus anything listed), so a web page cannot reach it by rebinding a
    name to 127.0.0.1. Elsewhere `hosts`, when set, lists the served names, and a
    browser `Origin` must be listed in `origins`.
    """

    origins: frozenset[str] = frozenset()
    hosts: frozenset[str] = frozenset()
    loopback_only: bool = False

    def check(self, headers: Mapping[str, str]) -> None:
        """Raises: ForbiddenOrigin."""
        host = headers.get("host")
        if host is not None:
            name = _host_name(host)
            listed = name in self.hosts
            if (self.hosts and not listed) or (
                self.loopback_only and not listed and name not in LOOPBACK_NAMES
            ):
                raise ForbiddenOrigin(f"Host {host!r} is not served here")
        origin = headers.get("origin")
        if origin is None or origin in self.origins:
            return
        if self.loopback_only and _origin_host(origin) in LOOPBACK_NAMES:
            return
        raise ForbiddenOrigin(f"Origin {origin!r} is not allowed")


def _origin_host(origin: str) -> str | None:
    """The host name of an `Origin` value, or None when it is no URL (`http://[`)."""
    try:
        return _host_name(urlsplit(origin).netloc)
    except ValueError:  # the URL's brackets do not pair
        return None


def accepts(accept: str, *media_types: str) -> bool:
    """Whether an `Accept` header's value lists every one of `media_types`, itself or
    under a wildcard (`text/*`, `*/*`). Parameters, `q` among them, are not read: a
    client that lists a type is taken to accept it."""
    listed = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    # A loop, not `all()` over a generator: every request is checked, and a generator
    # resumed by a builtin costs more than the test.
    for media_type in media_types:
        if listed.isdisjoint(_covering(media_type)):
            return False
    return True


@functools.cache
def _covering(media_type: str) -> frozenset[str]:
    """`media_type` and the wildcards that cover it."""
    return frozenset({media_type, media_type.partition("/")[0] + "/*", "*/*"})


def check_http(
    method: str, headers: Mapping[str, str], *, policy: OriginPolicy = OriginPolicy()
) -> None:
    """HTTP-level refusals, decided before the body is read.

    Raises:
        MethodNotAllowed, ForbiddenOrigin, NotAcceptable, UnsupportedMediaType (also for a
        compressed body).
    """
    if method != "POST":
        raise MethodNotAllowed()
    policy.check(headers)
    if not accepts(headers.get("accept", ""), "application/json", "text/event-stream"):
        raise NotAcceptable()
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaType()
    coding = headers.get("content-encoding")
    if coding is not None and coding.strip().lower() not in ("", "identity"):
        raise UnsupportedMediaType(
            "Content-Encoding is not supported on the MCP endpoint: send the body uncompressed"
        )


def decode_header_value(value: str | None) -> str | None:
    """Undo the `=?base64?...?=` sentinel; None for a malformed sentinel."""
    if value is None:
        return None
    match = _SENTINEL.fullmatch(value)
    if match is None:
        return value
    try:
        raw = base64.b64decode(match.group(1), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def read_headers(pairs: Iterable[tuple[str, str]]) -> tuple[dict[str, str], str | None]:
    """Headers by lower-case name (the last copy wins), and the first routing or
    `Mcp-Param-*` header that came more than once (first- and last-copy readers would
    disagree on it), or None: one pass over what arrived."""
    headers: dict[str, str] = {}
    duplicate = None
    for name, value in pairs:
        lower = name.lower()
        if (
            duplicate is None
            and lower in headers
            and (lower in ROUTING_HEADERS or lower.startswith("mcp-param-"))
        ):
            duplicate = lower
        headers[lower] = value
    return headers, duplicate


def duplicated_routing_header(raw_headers: Iterable[tuple[str, str]]) -> str | None:
    """A routing or `Mcp-Param-*` header sent twice (first- and last-copy readers disagree)."""
    return read_headers(raw_headers)[1]


def check_notification(headers: Mapping[str, str]) -> None:
    """A notification POST is accepted (202) at a served version; the core defines none over HTTP.

    Raises:
        HeaderMismatch: no version header (the spec's rule for a missing header).
        UnsupportedProtocolVersion: the version header names a revision not served.
    """
    requested = headers.get(VERSION_HEADER)
    if requested is None:
        raise HeaderMismatch("The MCP-Protocol-Version header is required")
    if Version.parse(requested) not in FRONT_VERSIONS:
        raise UnsupportedProtocolVersion(requested, front_supported())


def classify(
    obj: Any, headers: Mapping[str, str], duplicate: str | None = None
) -> FrontRequest | jsonrpc.Notification:
    """Run the validation ladder over one decoded POST body.

    `headers` maps lower-case names to values; `duplicate` names a routing header that
    came more than once (`read_headers`).

    Raises:
        InvalidRequest, InvalidParams, HeaderMismatch, UnsupportedProtocolVersion,
        MethodNotFound: the first rung that fails.
    """
    message = jsonrpc.parse_message(obj)
    if isinstance(message, jsonrpc.Notification):
        return message
    if isinstance(message, jsonrpc.Response):
        raise InvalidRequest("Clients must not POST JSON-RPC responses")
    if message.method == "initialize":
        # Removed at 2026-07-28 (404 -32601); name what is served, as modern-only servers SHOULD.
        raise MethodNotFound(
            "Method not found: initialize (this server speaks 2026-07-28 only)",
            {"supported": front_supported()},
        )

    if duplicate is not None:
        raise HeaderMismatch(f"The {duplicate} header appears more than once")

    meta = message.params.get("_meta")
    if not isinstance(meta, dict):
        raise InvalidParams(
            f"params._meta must be an object carrying {PROTOCOL_VERSION_KEY!r} "
            f"and {CLIENT_CAPABILITIES_KEY!r}"
        )
    if PROTOCOL_VERSION_KEY not in meta or CLIENT_CAPABILITIES_KEY not in meta:
        missing = [k for k in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if k not in meta]
        raise InvalidParams(f"params._meta is missing the required key(s): {', '.join(missing)}")

    _check_mirrored_headers(message, meta, headers)

    requested = meta[PROTOCOL_VERSION_KEY]
    if not isinstance(requested, str):
        raise InvalidParams(f"{PROTOCOL_VERSION_KEY} must be a string")
    version = Version.parse(requested)
    if version is None or version not in FRONT_VERSIONS:
        raise UnsupportedProtocolVersion(requested, front_supported())

    if message.method not in methods.FRONT:
        raise MethodNotFound(f"Method not found: {message.method}")

    envelope = read_envelope(version, meta)
    _check_params(message.method, message.params)
    return FrontRequest(
        id=message.id,
        method=message.method,
        params=message.params,
        envelope=envelope,
        trace=trace_context(meta, headers),
    )


def _check_mirrored_headers(
    message: jsonrpc.Request, meta: dict[str, Any], headers: Mapping[str, str]
) -> None:
    version_header = headers.get(VERSION_HEADER)
    if version_header is None:
        raise HeaderMismatch("The MCP-Protocol-Version header is required")
    if version_header != meta[PROTOCOL_VERSION_KEY]:
        raise HeaderMismatch(
            "The MCP-Protocol-Version header does not match params._meta's protocol version"
        )
    method_header = headers.get(METHOD_HEADER)
    if method_header is None:
        raise HeaderMismatch("The Mcp-Method header is required")
    if method_header != message.method:
        raise HeaderMismatch("The Mcp-Method header does not match the body's method")
    member = NAME_FIELD.get(message.method)
    if member is None and message.method in methods.TASKS:
        member = TASK_NAME_FIELD
    if member is None:
        return
    raw = headers.get(NAME_HEADER)
    if raw is None:
        raise HeaderMismatch(f"The Mcp-Name header is required for {message.method}")
    if not _VISIBLE_ASCII.fullmatch(raw):
        raise HeaderMismatch("The Mcp-Name header has invalid characters")
    if decode_header_value(raw) != message.params.get(member):
        raise HeaderMismatch(f"The Mcp-Name header does not match params.{member}")


def read_envelope(version: Version, meta: dict[str, Any]) -> Envelope:
    """The per-request fields of an already classified request's `_meta`.

    Raises:
        InvalidParams
    """
    caps = ClientCaps.from_wire(meta[CLIENT_CAPABILITIES_KEY])
    info = meta.get(CLIENT_INFO_KEY)
    if info is not None and not isinstance(info, dict):
        raise InvalidParams(f"{CLIENT_INFO_KEY} must be an object")
    level = meta.get(LOG_LEVEL_KEY)
    if level is not None and level not in LOG_LEVELS:
        raise InvalidParams(f"{LOG_LEVEL_KEY} must be one of {', '.join(LOG_LEVELS)}")
    token = meta.get("progressToken")
    if token is not None and (isinstance(token, bool) or not isinstance(token, str | int)):
        raise InvalidParams("progressToken must be a string or an integer")
    return Envelope(
        protocol_version=version,
        capabilities=caps,
        log_level=level,
        progress_token=token,
        tasks=tasks.declared(meta[CLIENT_CAPABILITIES_KEY]),
    )


def _check_params(method: str, params: dict[str, Any]) -> None:
    member = NAME_FIELD.get(method)
    if member is None:
        return
    if not isinstance(params.get(member), str) or not params[member]:
        raise InvalidParams(f"params.{member} must be a non-empty string")
    if method != "resources/read" and "arguments" in params:
        arguments = params["arguments"]
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidParams("params.arguments must be an object")
    if "inputResponses" in params and not isinstance(params["inputResponses"], dict):
        raise InvalidParams("params.inputResponses must be an object")
    if "requestState" in params and not isinstance(params["requestState"], str):
        raise InvalidParams("params.requestState must be a string")
