"""Conversions between the 2026-07-28 front and the legacy upstream, both directions.

- a front request becomes the legacy request sent upstream (envelope stripped,
  the gateway's own progress token stamped);
- a legacy result becomes a 2026 result (`resultType`, cache hints, serverInfo);
- a legacy error becomes a 2026 error (retired codes translated);
- a legacy server request becomes an `inputRequests` entry;
- the upstream's `initialize` result becomes `server/discover`'s answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LEGACY_RESOURCE_NOT_FOUND,
    UpstreamError,
    UpstreamRpcError,
)
from gateway.protocol import listen, methods
from gateway.protocol.inbound import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
    TRACE_KEYS,
    FrontRequest,
)
from gateway.protocol.tasks import EXTENSION as TASKS_EXTENSION
from gateway.protocol.versions import UPSTREAM_VERSIONS, Version, front_supported

#: Members of a 2026 request never sent upstream: MRTR's, and the removed 2025-11-25
#: `task` augmentation (the tasks extension says to ignore it).
_MRTR_PARAMS = ("inputResponses", "requestState", "task")
#: The `_meta` keys of a 2026 request that never go upstream, known without reading them
#: apart (every request has some): its envelope's (reserved), its progress token, its
#: trace context.
_DROPPED_META = frozenset(
    {
        PROTOCOL_VERSION_KEY,
        CLIENT_CAPABILITIES_KEY,
        CLIENT_INFO_KEY,
        LOG_LEVEL_KEY,
        "progressToken",
        *TRACE_KEYS,
    }
)


@dataclass(frozen=True, slots=True)
class CachePolicy:
    ttl_ms: int = 0
    """`ttlMs` of cacheable results (list results, `resources/read`, `server/discover`)."""
    scope: str = "private"
    """`cacheScope`: `private` or `public`."""


@dataclass(frozen=True, slots=True)
class UpstreamInfo:
    """What a legacy server said about itself in `initialize`."""

    protocol_version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any]
    instructions: str | None


def upstream_info(message: dict[str, Any] | None) -> UpstreamInfo:
    """What the legacy server's answer to `initialize` says about it.

    Raises:
        UpstreamError: it refused, or negotiated a version the gateway does not speak.
    """
    if message is None or not isinstance(message.get("result"), dict):
        error = (message or {}).get("error") or {}
        reason = error.get("message", "no result") if isinstance(error, dict) else "no result"
        raise UpstreamError(f"initialize was refused: {reason}")
    result = message["result"]
    negotiated = Version.parse(result.get("protocolVersion"))
    if negotiated is None or negotiated not in UPSTREAM_VERSIONS:
        raise UpstreamError(
            f"upstream negotiated protocol version {result.get('protocolVersion')!r}, "
            "which the gateway does not speak"
        )
    capabilities = result.get("capabilities")
    server_info = result.get("serverInfo")
    instructions = result.get("instructions")
    return UpstreamInfo(
        protocol_version=negotiated.value,
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        server_info=server_info if isinstance(server_info, dict) else {},
        instructions=instructions if isinstance(instructions, str) else None,
    )


def is_reserved_meta_key(key: str) -> bool:
    """Keys under a prefix whose second label is `modelcontextprotocol` or `mcp`."""
    prefix, slash, _ = key.partition("/")
    if not slash:
        return False
    labels = prefix.split(".")
    return len(labels) >= 2 and labels[1] in ("modelcontextprotocol", "mcp")


def upstream_params(front: FrontRequest, progress_token: str | None) -> dict[str, Any]:
    """The params of the legacy request for `front`.

    Drops the 2026 envelope keys and the MRTR members; keeps everything else of
    `_meta` (trace context, vendor keys); stamps the gateway's progress token so
    the gateway can re-tokenise progress for whichever round is current.
    """
    params = {k: v for k, v in front.params.items() if k not in _MRTR_PARAMS and k != "_meta"}
    meta = {
        k: v
        for k, v in front.params.get("_meta", {}).items()
        if k not in _DROPPED_META and not is_reserved_meta_key(k)
    }
    for key, value in front.trace.items():
        meta.setdefault(key, value)  # trace context travels in _meta, the MCP convention
    if progress_token is not None:
        meta["progressToken"] = progress_token
    if meta:
        params["_meta"] = meta
    return params


def decorate_result(
    method: str,
    result: dict[str, Any],
    *,
    server_info: dict[str, Any] | None,
    cache: CachePolicy,
    cacheable: bool = True,
) -> dict[str, Any]:
    """A legacy result as a 2026 `complete` result."""
    out = dict(result)
    out["resultType"] = "complete"
    if method in methods.CACHEABLE and cacheable:
        out.setdefault("ttlMs", cache.ttl_ms)
        out.setdefault("cacheScope", cache.scope)
    if method in methods.CACHEABLE and not cacheable:
        out["ttlMs"] = 0  # an MRTR retry's result MUST NOT be cached
        out["cacheScope"] = "private"
    meta = out.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if server_info is not None:
        meta.setdefault(SERVER_INFO_KEY, server_info)
    if meta:
        out["_meta"] = meta
    return out


def translate_error(error: dict[str, Any]) -> UpstreamRpcError:
    """A legacy JSON-RPC error object as the error a 2026 client may receive.

    -32002 (resource not found) is retired: it becomes -32602. Codes in the
    spec-reserved band -32020..-32099 that 2026 does not define (e.g. -32042)
    must not be emitted: they become -32603 with the original code in data.
    """
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    if not isinstance(code, int) or isinstance(code, bool):
        return UpstreamRpcError(INTERNAL_ERROR, "Upstream sent a malformed error", None)
    if not isinstance(message, str):
        message = "Upstream error"
    if code == LEGACY_RESOURCE_NOT_FOUND:
        return UpstreamRpcError(INVALID_PARAMS, message, data)
    if -32099 <= code <= -32020 and code not in (-32020, -32021, -32022):
        return UpstreamRpcError(INTERNAL_ERROR, message, {"upstreamCode": code, "upstream": data})
    return UpstreamRpcError(code, message, data)


URL_ELICITATION_REQUIRED = -32042


def url_elicitations(error: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The URL elicitations of a legacy `-32042` error, as 2026 params, or None.

    2025-11-25 servers refuse a request until the user has visited some URLs; 2026 has
    no such error (MUST NOT emit), so the gateway asks them as a round instead.
    """
    if error.get("code") != URL_ELICITATION_REQUIRED or not isinstance(error.get("data"), dict):
        return None
    items = error["data"].get("elicitations")
    if not isinstance(items, list) or not items:
        return None
    urls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            return None
        message = item.get("message") if isinstance(item.get("message"), str) else ""
        urls.append({"mode": "url", "message": message, "url": item["url"]})
    return urls


def input_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A legacy server request as a 2026 `inputRequests` value (no id, no task, no _meta)."""
    if method == "roots/list":
        return {"method": "roots/list"}
    clean = {k: v for k, v in params.items() if k not in ("_meta", "task")}
    if method == "elicitation/create" and clean.get("mode") == "url":
        clean.pop("elicitationId", None)  # 2026 has no such field; the gateway keeps it
    return {"method": method, "params": clean}


def discover_result(
    info: UpstreamInfo,
    cache: CachePolicy,
    *,
    listens: bool = False,
    legacy: bool = False,
    tasks: bool = False,
) -> dict[str, Any]:
    """`server/discover` for a legacy server, from its `initialize` result; `listens`:
    whether `subscriptions/listen` is served (`limits.max_listens` above 0); `legacy`:
    whether 2025 clients are served on the route too (the legacy lane), whose revisions
    are then listed after 2026-07-28's; `tasks`: whether some tool runs as a task (the
    tasks extension is advertised; a legacy `capabilities.tasks` never is)."""
    capabilities = {
        k: v
        for k, v in info.capabilities.items()
        if k in ("logging", "completions", "prompts", "resources", "tools", "experimental")
    }
    # Change notifications and resource subscriptions reach a client only through
    # `subscriptions/listen`: advertised as the server declares them while it is served,
    # never otherwise.
    for name in ("prompts", "resources", "tools"):
        if isinstance(capabilities.get(name), dict):
            capabilities[name] = {
                k: v for k, v in capabilities[name].items() if k not in ("listChanged", "subscribe")
            }
    if listens:
        for name, features in listen.advertises(info.capabilities).items():
            capabilities[name] = {**capabilities[name], **features}
    if tasks:
        capabilities["extensions"] = {TASKS_EXTENSION: {}}
    result: dict[str, Any] = {
        "supportedVersions": front_supported(legacy=legacy),
        "capabilities": capabilities,
    }
    if info.instructions:
        result["instructions"] = info.instructions
    return decorate_result("server/discover", result, server_info=info.server_info, cache=cache)
