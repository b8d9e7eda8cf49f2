"""What a hostile client sends the front, as hypothesis strategies, and what the spec lets
the front answer.

- bodies: 2026-07-28 requests with one or more fields mutated (wrong types, unicode, huge
  numbers, deep nesting, duplicate keys, `NaN`, lone surrogate escapes), notifications,
  responses, batches, other JSON, bytes that are not JSON, truncated JSON;
- the headers a correct client sends with a body (`client_headers`), and mutations of them
  (dropped, changed, duplicated, garbage, the `=?base64?...?=` sentinel);
- `pair_allowed`: the (HTTP status, JSON-RPC code) pairs of the spec's table (§6.5,
  docs/protocol.md, "The front").

A plain module shared by the sans-IO properties (tests/protocol/*_fuzz.py) and the HTTP
ones (tests/web/test_front_fuzz.py); nothing here starts anything.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from gateway.errors import STATUS_FOR_CODE
from tests.support.wire import ALL_CAPS, PROTOCOL

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
NAME_MEMBER = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

# --- JSON values -------------------------------------------------------------------

#: Strings a parser or a header check may trip on, beside hypothesis' own unicode.
ODD_TEXTS = [
    "",
    " ",
    " echo",
    "echo ",
    "=?base64?",
    "=?base64?ZWNobw==?=",
    "=?base64?***?=",
    "\x00",
    "\x7f",
    "a\tb",
    "a\r\nb: c",
    "\u2028",
    "é",
    "日本語",
    "🎉",
    "\ufeff",
    "x" * 300,
]
texts = st.one_of(st.text(max_size=24), st.sampled_from(ODD_TEXTS))
#: Integers around the edges orjson and the standard library read differently.
integers = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**30]),
)
json_leaves = st.one_of(st.none(), st.booleans(), integers, st.floats(), texts)
json_values = st.recursive(
    json_leaves,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts, kids, max_size=4),
    max_leaves=10,
)


@dataclass(frozen=True)
class Raw:
    """JSON text put in a body as it is, where a value would be: what no Python value
    renders (`NaN` spelt out, `1e999`, a lone surrogate escape, nesting past a limit)."""

    text: str


def _deep(depth: int, kind: str) -> str:
    if kind == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


RAW_FRAGMENTS = [
    "NaN",
    "-Infinity",
    "1e999",
    "-1e999",
    "1e-999",
    "-0",
    "1" + "0" * 20,
    "-" + "9" * 19,
    "9" * 4300,
    "9" * 4301,
    "1.7976931348623157e308",
    '"\\ud800"',
    '"\\udc00\\ud800"',
    '"\\ud83d\\ude00"',
    '"\\u0000"',
    '"\\uD800x"',
]
DEPTHS = [64, 128, 129, 254, 255, 256, 500, 990, 1000, 1023, 1024, 1025, 5000]
raw_fragments = st.one_of(
    st.sampled_from(RAW_FRAGMENTS),
    st.builds(_deep, st.sampled_from(DEPTHS), st.sampled_from(["[", "{"])),
).map(Raw)


def render(value: Any, *, ascii_only: bool = False) -> bytes:
    """`value` as JSON text, each `Raw` in it written as its text."""
    raws: list[str] = []

    def default(obj: Any) -> str:
        if not isinstance(obj, Raw):
            raise TypeError(type(obj).__name__)
        raws.append(obj.text)
        return f"\x00raw{len(raws) - 1}\x00"

    text = json.dumps(value, default=default, ensure_ascii=ascii_only)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw, 1)
    return text.encode()


def read_as_client(data: bytes) -> Any:
    """The body as the standard library reads it (NaN and lone surrogates included), or
    `NOT_JSON`: the test's own reading, not the gateway's."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return NOT_JSON


NOT_JSON = object()


def valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def request_id(data: bytes) -> Any:
    """The id a reply to `data` must carry: the request's, when it has a valid one."""
    value = read_as_client(data)
    if isinstance(value, dict) and valid_id(value.get("id")):
        return value["id"]
    return None


# --- requests ----------------------------------------------------------------------

#: Names the legacy test server serves without asking anything (nothing parks), and
#: names it does not know.
TOOLS = ["echo", "regional", "no-such-tool"]
PROMPTS = ["plain", "no-such-prompt"]
URIS = ["static://hello", "static://nope", "file:///etc/passwd", "http://[::1"]
METHODS = [
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "server/discover",
    "subscriptions/listen",
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "tools/frobnicate",
]
ids: st.SearchStrategy[Any] = st.one_of(
    integers,
    texts,
    st.sampled_from([None, True, 1.0, 1.5, [], {}, "", "1"]),
    raw_fragments,
)
#: A value where another was due: any JSON mostly, now and then text no Python value
#: renders (which the door refuses as a whole, so it must not crowd out the rest).
anything = st.one_of(json_values, json_values, json_values, raw_fragments)

#: The parts of a request a mutation may put off, one or two per example (none in some).
PARTS = [
    "jsonrpc",
    "id",
    "method",
    "params",
    "drop-member",
    "extra-member",
    "meta",
    "version",
    "capabilities",
    "drop-required",
    "optional-meta",
    "target",
    "arguments",
    "argument",
    "state",
    "answers",
    "cursor",
]

_ECHO_ARGUMENTS = st.fixed_dictionaries({"text": texts})
_REGIONAL_ARGUMENTS = st.fixed_dictionaries({"region": texts}, optional={"count": integers})
_OTHER_ARGUMENTS = st.dictionaries(texts, texts, max_size=3)
_PROMPT_ARGUMENTS = st.dictionaries(texts, texts, max_size=2)
_FLAGS = st.dictionaries(
    st.sampled_from(["toolsListChanged", "promptsListChanged", "resourcesListChanged"]),
    st.booleans(),
    max_size=3,
)
_TARGETS = {
    "tools/call": ("name", st.sampled_from(TOOLS)),
    "prompts/get": ("name", st.sampled_from(PROMPTS)),
    "resources/read": ("uri", st.sampled_from(URIS)),
}
_OPTIONAL_META = {
    "io.modelcontextprotocol/logLevel": st.one_of(st.just("info"), anything),
    "io.modelcontextprotocol/clientInfo": anything,
    "progressToken": anything,
    "traceparent": st.one_of(
        st.just("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), anything
    ),
}


def _params(draw: st.DrawFn, method: str, off: set[str]) -> dict[str, Any]:
    """Params of `method` as a client sends them, but for the parts in `off`."""
    params: dict[str, Any] = {}
    if method in _TARGETS:
        member, targets = _TARGETS[method]
        params[member] = draw(anything if "target" in off else targets)
    if method == "tools/call":
        arguments = {"echo": _ECHO_ARGUMENTS, "regional": _REGIONAL_ARGUMENTS}
        params["arguments"] = draw(arguments.get(str(params["name"]), _OTHER_ARGUMENTS))
    elif method == "prompts/get":
        params["arguments"] = draw(_PROMPT_ARGUMENTS)
    elif method == "completion/complete":
        params["ref"] = {"type": "ref/prompt", "name": draw(st.sampled_from(PROMPTS))}
        params["argument"] = {"name": "word", "value": draw(texts)}
    elif method == "subscriptions/listen":
        params["notifications"] = draw(_FLAGS)
    if "arguments" in off:
        params[draw(st.sampled_from(["arguments", "ref", "notifications"]))] = draw(anything)
    if "argument" in off and isinstance(params.get("arguments"), dict):
        params["arguments"][draw(st.sampled_from(["text", "region", "count", "word"]))] = draw(
            anything
        )
    if "state" in off:
        params["requestState"] = draw(st.one_of(texts, st.just("gw1.AAAA"), anything))
    if "answers" in off:
        params["inputResponses"] = draw(anything)
    if "cursor" in off:
        params["cursor"] = draw(anything)
    params["_meta"] = _meta(draw, off)
    return params


def _meta(draw: st.DrawFn, off: set[str]) -> Any:
    """`params._meta` as a client sends it, but for the parts in `off`."""
    if "meta" in off:
        return draw(anything)
    meta: dict[str, Any] = {
        VERSION_KEY: draw(st.one_of(texts, anything)) if "version" in off else PROTOCOL,
        CAPS_KEY: draw(anything) if "capabilities" in off else ALL_CAPS,
    }
    if "drop-required" in off:
        for key in draw(st.sets(st.sampled_from([VERSION_KEY, CAPS_KEY]), min_size=1)):
            del meta[key]
    if "optional-meta" in off:
        key = draw(st.sampled_from(sorted(_OPTIONAL_META)))
        meta[key] = draw(_OPTIONAL_META[key])
    return meta


@st.composite
def requests(
    draw: st.DrawFn, methods: list[str] | None = None, most_off: int = 2
) -> dict[str, Any]:
    """A 2026-07-28 request (as a dict, `Raw` values in it) with up to `most_off` of its
    `PARTS` put off: `jsonrpc`, `id` (or none: a notification), `method`, `params`, `_meta`
    and its keys, the tool, prompt or URI, arguments, requestState, inputResponses, extra
    members."""
    off = draw(st.sets(st.sampled_from(PARTS), max_size=most_off))
    method = draw(st.sampled_from(methods or METHODS))
    message: dict[str, Any] = {
        "jsonrpc": draw(st.sampled_from(["1.0", 2.0, None, ""])) if "jsonrpc" in off else "2.0",
        "id": draw(ids) if "id" in off else draw(st.one_of(st.integers(0, 2**31), texts)),
        "method": draw(st.one_of(texts, anything)) if "method" in off else method,
        "params": draw(anything) if "params" in off else _params(draw, method, off),
    }
    if "drop-member" in off:
        del message[draw(st.sampled_from(sorted(message)))]
    if "extra-member" in off:
        message[draw(st.sampled_from(["result", "error", "x"]))] = draw(anything)
    return message


@dataclass(frozen=True)
class Body:
    """A POST body: its bytes, and the value a client meant (whose headers it sends)."""

    data: bytes
    meant: Any


@st.composite
def bodies(draw: st.DrawFn, methods: list[str] | None = None) -> Body:
    """Any body a client may POST: mostly a (mutated) request, else a notification, a
    response, a batch, other JSON, duplicate members, truncated JSON, or not JSON."""
    kind = draw(
        st.sampled_from(
            ["request"] * 8 + ["duplicate", "batch", "response", "json", "truncated", "bytes"]
        )
    )
    message = draw(requests(methods, most_off=draw(st.sampled_from([1, 2]))))
    ascii_only = draw(st.booleans())
    if kind == "request":
        return Body(render(message, ascii_only=ascii_only), message)
    if kind == "duplicate":  # one member twice: the last one is the member (RFC 8259 §4)
        member = draw(st.sampled_from(["id", "method", "jsonrpc", "params"]))
        other = render({member: draw(anything)})[1:-1]
        data = render(message, ascii_only=ascii_only)
        if draw(st.booleans()):
            data = b"{" + other + b"," + data[1:] if len(data) > 2 else data
        else:
            data = data[:-1] + b"," + other + b"}" if len(data) > 2 else data
        return Body(data, message)
    if kind == "batch":
        batch = draw(st.lists(requests(methods), max_size=3))
        return Body(render(batch), message)
    if kind == "response":
        response = {"jsonrpc": "2.0", "id": draw(ids), "result": draw(anything)}
        return Body(render(response), message)
    if kind == "json":
        return Body(render(draw(anything)), message)
    data = render(message, ascii_only=ascii_only)
    if kind == "truncated":
        return Body(data[: draw(st.integers(0, max(0, len(data) - 1)))], message)
    return Body(draw(st.binary(max_size=64)), message)


# --- headers -----------------------------------------------------------------------


def sentinel(value: str) -> str:
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


_PLAIN = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")


def header_value(value: str) -> str:
    """A value as a correct client writes it in `Mcp-Name` or `Mcp-Param-*`: plain when it is
    visible ASCII without spaces at its ends and not sentinel-like, else the sentinel."""
    if _PLAIN.fullmatch(value) and not value.startswith("=?base64?"):
        return value
    return sentinel(value)


def client_headers(meant: Any) -> dict[str, str]:
    """The headers a correct 2026-07-28 client sends with the request it meant (lower-case
    names): the routing headers mirror what the body says, where it says something a
    header can carry."""
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    params = meant.get("params") if isinstance(meant, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(VERSION_KEY) if isinstance(meta, dict) else None
    headers["mcp-protocol-version"] = version if isinstance(version, str) else PROTOCOL
    method = meant.get("method") if isinstance(meant, dict) else None
    if isinstance(method, str):
        headers["mcp-method"] = method
        target = params.get(NAME_MEMBER.get(method, "")) if isinstance(params, dict) else None
        if isinstance(target, str):
            headers["mcp-name"] = header_value(target)
        arguments = params.get("arguments") if isinstance(params, dict) else None
        region = arguments.get("region") if isinstance(arguments, dict) else None
        if isinstance(region, str) and not isinstance(region, bool):
            headers["mcp-param-region"] = header_value(region)
    return {name: value for name, value in headers.items() if _sendable(value)}


def _sendable(value: str) -> bool:
    """A value an HTTP/1.1 client can put on a header line as it is (RFC 9110 §5.5: no
    control character but a tab)."""
    return not any((c < " " and c != "\t") or c == "\x7f" for c in value)


#: Header values a parser or a check may trip on: garbage, the sentinel, near-misses.
header_garbage = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            PROTOCOL + " ",
            "2025-11-25",
            "=?base64?ZWNobw==?=",
            "=?base64?***?=",
            "=?base64??=",
            "=?base64?" + "A" * 5000 + "?=",
            "application/json;;;",
            "*/*",
            "text/*, application/*",
            "gzip",
            "identity",
            "Bearer",
            "Bearer ",
            "Bearer mrtr_" + "A" * 43,
            "Bearer eyJhbGciOiJub25lIn0.e30.",
            "Basic Zm9vOmJhcg==",
            "http://[",
            "http://localhost",
            "null",
            "[::1]:8080",
            "localhost:99999",
            "\u00e9t\u00e9",  # written in Latin-1: bytes that are no UTF-8
            "Bearer \xff\xfe",
            "\u65e5\u672c",  # written in UTF-8
            "\U0001f389",
        ]
    ),
    # Latin-1 and a little beyond (the test writes what Latin-1 holds as single bytes, past
    # 0x7f no UTF-8), and now and then a control character an HTTP parser refuses.
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF), max_size=40),
    st.text(st.characters(min_codepoint=0x80, max_codepoint=0xFF), min_size=1, max_size=8),
    st.text(st.characters(max_codepoint=0x2FF, exclude_characters="\r\n\x00"), max_size=8),
)
#: The headers a mutation touches: the routing ones, and those the front checks first.
HEADER_NAMES = [
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "mcp-param-region",
    "mcp-param-other",
    "accept",
    "content-type",
    "content-encoding",
    "origin",
    "host",
    "authorization",
    "x-request-id",
    "traceparent",
]


@st.composite
def header_lists(
    draw: st.DrawFn, meant: Any, first: tuple[tuple[str, str], ...] = ()
) -> list[tuple[str, str]]:
    """The headers of a correct client for `meant` (after `first`, e.g. `Host`), then
    mutated: some dropped, changed, sent twice (same or other value), in other case, or
    garbage added."""
    headers = [*first, *client_headers(meant).items()]
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(HEADER_NAMES))
        how = draw(st.sampled_from(["drop", "change", "twice", "same-twice", "case"]))
        present = [i for i, (n, _) in enumerate(headers) if n == name]
        if how == "drop":
            headers = [(n, v) for n, v in headers if n != name]
        elif how == "change" and present:
            headers[present[0]] = (name, draw(header_garbage))
        elif how == "same-twice" and present:
            headers.append(headers[present[0]])
        elif how == "case" and present:
            headers[present[0]] = (name.upper(), headers[present[0]][1])
        else:
            headers.append((name, draw(header_garbage)))
    return headers


# --- the spec's table -------------------------------------------------------------

#: HTTP-level refusals (decided before or without the body: Origin/Host, auth, Accept,
#: size, media type, a body that cannot be read): a JSON-RPC error without id, -32600.
REFUSAL_STATUSES = frozenset({401, 403, 406, 408, 413, 415})


def pair_allowed(status: int, code: int) -> bool:
    """Whether a JSON answer's HTTP status and JSON-RPC error code are a pair of the table:
    a code of the table with its status, an HTTP-level refusal with -32600, and any other
    code (a server's own error passed on) with 200. The gateway's own -32603 statuses
    (429, 502, 503) are left out on purpose: the properties here run against a healthy
    upstream with room to spare, so the client's input alone must never earn one."""
    if status in REFUSAL_STATUSES:
        return code == -32600
    return status == STATUS_FOR_CODE.get(code, 200)
