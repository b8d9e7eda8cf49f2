"""Properties of the front door's sans-IO checks over hostile requests (hypothesis).

Whatever the body and headers, `inbound.check_http` refuses only with its HTTP errors,
`inbound.classify` accepts a request only when its headers mirror its body, and refuses
everything else with an error whose code and HTTP status are a pair of the spec's table
(§6.5); the `Mcp-Name` and `Mcp-Param-*` headers a correct client writes are always
accepted, and any other value is refused with -32020 or matches. The examples are the
same on every run (tests/conftest.py); the counts are each test's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from gateway.errors import STATUS_FOR_CODE, ForbiddenOrigin, HeaderMismatch, HttpError, RpcError
from gateway.protocol import inbound, jsonrpc, methods, params
from tests.support.fuzz import (
    NAME_MEMBER,
    VERSION_KEY,
    Body,
    bodies,
    client_headers,
    header_garbage,
    header_lists,
    header_value,
    render,
    requests,
    sentinel,
    texts,
)

LOOPBACK = inbound.OriginPolicy(loopback_only=True, origins=frozenset({"https://app.example"}))


def classified(body: Body, pairs: list[tuple[str, str]]) -> Any:
    """What the front's ladder makes of `body` with these headers: the message, or the
    error it answers with."""
    headers, duplicate = inbound.read_headers(pairs)
    try:
        return inbound.classify(jsonrpc.decode(body.data), headers, duplicate)
    except RpcError as exc:
        return exc


@settings(max_examples=500)
@given(st.data())
def test_a_request_is_accepted_only_with_headers_that_mirror_it_else_refused_by_the_table(
    data: st.DataObject,
) -> None:
    body = data.draw(bodies(), label="body")
    pairs = data.draw(header_lists(body.meant), label="headers")
    outcome = classified(body, pairs)
    event(type(outcome).__name__)
    if isinstance(outcome, RpcError):
        code = outcome.error_object()["code"]
        assert outcome.status == STATUS_FOR_CODE[code], (type(outcome).__name__, code)
        return
    if isinstance(outcome, jsonrpc.Notification):
        return
    headers = {name.lower(): value for name, value in pairs}
    assert sum(name.lower() == "mcp-method" for name, _ in pairs) == 1
    assert headers["mcp-method"] == outcome.method in methods.FRONT
    assert headers["mcp-protocol-version"] == outcome.params["_meta"][VERSION_KEY]
    member = NAME_MEMBER.get(outcome.method)
    if member is not None:
        target = outcome.params[member]
        assert inbound.decode_header_value(headers["mcp-name"]) == target == outcome.target


@settings(max_examples=300)
@given(st.data())
def test_a_correct_clients_request_with_one_routing_header_changed_is_a_header_mismatch(
    data: st.DataObject,
) -> None:
    methods = ["tools/call", "prompts/get", "resources/read", "tools/list"]
    meant = data.draw(requests(methods, most_off=1), label="request")
    body = Body(render(meant), meant)
    pairs = list(client_headers(meant).items())
    good = classified(body, pairs)
    event(type(good).__name__)
    if not isinstance(good, inbound.FrontRequest):
        return
    required = ["mcp-protocol-version", "mcp-method"]
    name = data.draw(st.sampled_from(required + ["mcp-name"] * (good.method in NAME_MEMBER)))
    how = data.draw(st.sampled_from(["drop", "twice", "change"]))
    kept = [(n, v) for n, v in pairs if n.lower() != name]
    if how == "drop":
        changed = kept
    else:
        value = data.draw(header_garbage)
        if how == "change":
            mirrored = dict((n.lower(), v) for n, v in pairs)[name]
            if inbound.decode_header_value(value) == inbound.decode_header_value(mirrored):
                return  # the same value, spelt otherwise
            changed = [*kept, (name, value)]
        else:
            changed = [*pairs, (name, value)]
    outcome = classified(body, changed)
    event(how)
    assert isinstance(outcome, HeaderMismatch), outcome


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(["accept", "content-type", "content-encoding", "origin", "host"]),
        header_garbage,
    ),
    st.sampled_from(["POST", "GET", "DELETE", "PUT", "post", "PATCH"]),
)
@example({"origin": "http://["}, "POST")
@example({"origin": "http://[::1", "host": "[::1"}, "POST")
def test_http_checks_refuse_only_with_their_http_errors(
    headers: dict[str, str], method: str
) -> None:
    for policy in (LOOPBACK, inbound.OriginPolicy(hosts=frozenset({"mcp.example"}))):
        try:
            inbound.check_http(method, headers, policy=policy)
        except HttpError as exc:
            assert exc.http_status in (403, 405, 406, 415)


@pytest.mark.parametrize("origin", ["http://[", "http://[::1", "https://a]b"])
def test_an_origin_that_is_no_url_is_forbidden_on_a_loopback_gateway(origin: str) -> None:
    """Its brackets do not pair: urlsplit refuses it, and the door says 403, not 500."""
    ok = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with pytest.raises(ForbiddenOrigin):
        inbound.check_http("POST", {**ok, "origin": origin}, policy=LOOPBACK)


@settings(max_examples=300)
@given(st.one_of(texts, header_garbage))
def test_the_sentinel_a_client_writes_is_read_back_and_any_value_decodes_or_is_refused(
    value: str,
) -> None:
    assert inbound.decode_header_value(sentinel(value)) == value
    assert inbound.decode_header_value(header_value(value)) == value
    decoded = inbound.decode_header_value(value)
    assert decoded is None or isinstance(decoded, str)


@settings(max_examples=300)
@given(
    st.dictionaries(texts, st.one_of(texts, st.integers(), st.booleans(), st.none()), max_size=4),
    st.dictionaries(
        st.sampled_from(["mcp-param-region", "mcp-param-count", "mcp-param-x"]),
        header_garbage,
        max_size=3,
    ),
)
def test_mcp_param_headers_a_client_writes_pass_and_others_match_or_are_a_mismatch(
    arguments: dict[str, Any], garbage: dict[str, str]
) -> None:
    schema = {
        "type": "object",
        "properties": {
            name: {"type": "string", "x-mcp-header": f"P{i}"} for i, name in enumerate(arguments)
        },
    }
    declared = params.declared_headers(schema)
    assert set(declared) == set(arguments)
    written = {
        f"mcp-param-p{i}": header_value(_rendered(value))
        for i, value in enumerate(arguments.values())
        if value is not None
    }
    params.check_param_headers(declared, arguments, written)
    try:
        params.check_param_headers(declared, arguments, {**written, **garbage})
    except HeaderMismatch:
        pass


def _rendered(value: Any) -> str:
    """An argument as a client writes it in its header (booleans in JSON's spelling)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["Mcp-Method", "mcp-method", "MCP-NAME", "Mcp-Param-A", "mcp-param-a", "Accept"]
            ),
            texts,
        ),
        max_size=6,
    )
)
def test_a_routing_header_sent_twice_in_any_case_is_named_and_the_last_copy_is_read(
    pairs: list[tuple[str, str]],
) -> None:
    headers, duplicate = inbound.read_headers(pairs)
    names = [name.lower() for name, _ in pairs]
    twice = {
        n
        for n in names
        if names.count(n) > 1 and (n in inbound.ROUTING_HEADERS or n.startswith("mcp-param-"))
    }
    assert (duplicate is None) == (not twice) and (duplicate is None or duplicate in twice)
    assert headers == {name.lower(): value for name, value in pairs}
