"""Answer checks, key derivation and capability bookkeeping."""

from __future__ import annotations

import re

import pytest

from gateway.errors import InvalidParams
from gateway.protocol import inputs, keys
from gateway.protocol.capabilities import NO_CAPABILITIES, ClientCaps
from gateway.protocol.versions import Version

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "ok": {"type": "boolean"},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "S"}, {"const": "m", "title": "M"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 2},
        "mail": {"type": "string", "format": "email"},
    },
    "required": ["name"],
}


@pytest.mark.parametrize(
    ("content", "fits"),
    [
        ({"name": "ann"}, True),
        (
            {
                "name": "ann",
                "age": 3,
                "ok": False,
                "color": "red",
                "size": "m",
                "tags": ["a"],
                "mail": "a@b.c",
            },
            True,
        ),
        ({}, False),
        ({"name": "a"}, False),
        ({"name": "ann", "age": 2.5}, False),
        ({"name": "ann", "age": 151}, False),
        ({"name": "ann", "age": True}, False),
        ({"name": "ann", "ok": "yes"}, False),
        ({"name": "ann", "color": "green"}, False),
        ({"name": "ann", "size": "xl"}, False),
        ({"name": "ann", "tags": ["a", "c"]}, False),
        ({"name": "ann", "tags": ["a", "b", "a"]}, False),
        ({"name": "ann", "mail": "nope"}, False),
    ],
)
def test_form_answers_are_checked_against_the_requested_schema(content: dict, fits: bool) -> None:
    assert inputs.fits_form(SCHEMA, {"action": "accept", "content": content}) is fits


def test_decline_and_cancel_always_fit() -> None:
    assert inputs.fits_form(SCHEMA, {"action": "decline"})
    assert inputs.fits_form(SCHEMA, {"action": "cancel"})


SAMPLED = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "x"}}


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("elicitation/create", {"action": "maybe"}),
        ("elicitation/create", {"action": "accept", "content": [1]}),
        ("sampling/createMessage", {"role": "assistant", "content": {"type": "text"}}),
        ("sampling/createMessage", {"role": "assistant", "model": "m", "content": "text"}),
        ("roots/list", {"roots": [{"uri": "http://x"}]}),
        ("roots/list", {}),
        ("roots/list", "roots"),
        # What a legacy server's SDK refuses, which had spent the call's round:
        ("sampling/createMessage", {**SAMPLED, "role": "weird"}),
        ("sampling/createMessage", {**SAMPLED, "content": {"type": "bogus"}}),
        ("sampling/createMessage", {**SAMPLED, "content": {"type": "text"}}),
        ("sampling/createMessage", {**SAMPLED, "content": {"type": "text", "text": 5}}),
        ("sampling/createMessage", {**SAMPLED, "content": {"type": "image", "data": "x"}}),
        ("sampling/createMessage", {**SAMPLED, "content": []}),
        ("sampling/createMessage", {**SAMPLED, "stopReason": 1}),
        ("sampling/createMessage", {**SAMPLED, "_meta": 5}),
        ("roots/list", {"roots": [{"uri": "file:///x", "name": 5}]}),
        ("roots/list", {"roots": [{"uri": "file:///x", "_meta": 5}]}),
    ],
)
def test_malformed_answers_are_invalid_params(method: str, answer) -> None:
    with pytest.raises(InvalidParams):
        inputs.check_shape("k", method, answer)


def test_well_formed_answers_pass() -> None:
    inputs.check_shape(
        "k",
        "sampling/createMessage",
        {"role": "assistant", "model": "m", "content": [{"type": "text", "text": "x"}]},
    )
    inputs.check_shape("k", "roots/list", {"roots": [{"uri": "file:///a", "name": "a"}]})
    inputs.check_shape("k", "sampling/createMessage", {**SAMPLED, "stopReason": "endTurn"})
    image = {"type": "image", "data": "aGk=", "mimeType": "image/png"}
    inputs.check_shape("k", "sampling/createMessage", {**SAMPLED, "content": [image]})
    tool = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    inputs.check_shape("k", "sampling/createMessage", {**SAMPLED, "content": [tool]})
    inputs.check_shape("k", "roots/list", {"roots": [{"uri": "file:///a", "name": None}]})
    inputs.check_shape(
        "k", "elicitation/create", {"action": "accept", "content": {"tags": ["a"], "n": 1.5}}
    )


def test_default_keys_are_derived_from_the_request() -> None:
    form = {"requestedSchema": {"properties": {"b": {}, "a": {}}}}
    assert keys.default_key("elicitation/create", form) == "elicit.a+b"
    assert keys.default_key("elicitation/create", {"mode": "url"}) == "elicit.url"
    assert keys.default_key("sampling/createMessage", {}) == "sampling"
    assert keys.default_key("roots/list", {}) == "roots"


def test_rules_match_on_method_fields_and_message() -> None:
    rules = (
        keys.KeyRule(key="confirm", message=re.compile("really")),
        keys.KeyRule(key="who", method="elicitation/create", fields=frozenset({"name"})),
        keys.KeyRule(key="llm", method="sampling/createMessage"),
    )
    ask_name = {"message": "Name?", "requestedSchema": {"properties": {"name": {}, "x": {}}}}
    assert keys.assign_key("elicitation/create", ask_name, rules, []) == "who"
    assert keys.assign_key("elicitation/create", {"message": "really?"}, rules, []) == "confirm"
    sample = {"messages": [{"role": "user", "content": {"type": "text", "text": "really"}}]}
    assert keys.assign_key("sampling/createMessage", sample, rules, []) == "confirm"
    assert keys.assign_key("roots/list", {}, rules, ["roots", "roots#2"]) == "roots#3"


def test_capabilities_are_read_declared_upstream_and_checked() -> None:
    caps = ClientCaps.from_wire(
        {"elicitation": {}, "sampling": {"tools": {}}, "roots": {"listChanged": True}}
    )
    assert caps == ClientCaps(elicitation_form=True, sampling=True, sampling_tools=True, roots=True)
    assert ClientCaps.from_key(caps.key) == caps
    assert caps.legacy_declaration(Version.V2025_11_25) == {
        "elicitation": {"form": {}},
        "sampling": {"tools": {}},
        "roots": {},
    }
    assert caps.legacy_declaration(Version.V2025_06_18) == {
        "elicitation": {},
        "sampling": {},
        "roots": {},
    }
    assert (
        ClientCaps.from_wire({"elicitation": {"url": {}}}).legacy_declaration(Version.V2025_06_18)
        == {}
    )
    assert caps.missing_for("elicitation/create", {"mode": "url"}) == {"elicitation": {"url": {}}}
    assert caps.missing_for("sampling/createMessage", {"includeContext": "allServers"}) == {
        "sampling": {"context": {}}
    }
    assert caps.missing_for("roots/list", {}) is None
    assert ClientCaps().key == "none"
    with pytest.raises(InvalidParams):
        ClientCaps.from_wire({"sampling": True})


def test_each_capability_set_is_one_object_with_its_own_flags() -> None:
    # Read once per request, so the sets are shared objects: each must still be its own.
    for n in range(64):
        flags = tuple(bool(n >> bit & 1) for bit in range(6))
        built = ClientCaps(*flags)
        assert ClientCaps.from_key(built.key) == built
        assert ClientCaps.from_key(built.key) is ClientCaps.from_key(built.key)
    declared = {"elicitation": {"url": {}}, "sampling": {"context": {}}}
    first, again = ClientCaps.from_wire(declared), ClientCaps.from_wire(dict(declared))
    assert first is again
    assert first == ClientCaps(elicitation_url=True, sampling=True, sampling_context=True)
    assert ClientCaps.from_wire({}) is NO_CAPABILITIES == ClientCaps()


def test_each_way_a_form_answer_misses_its_schema_is_named_without_the_value() -> None:
    from gateway.protocol.inputs import form_problems

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2},
            "age": {"type": "integer", "maximum": 150},
            "mail": {"type": "string", "format": "email"},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "ok"],
    }
    answer = {
        "action": "accept",
        "content": {"name": "x", "age": 3.5, "mail": "secret-value", "color": "green"},
    }
    assert form_problems(schema, answer) == [
        "'ok' is required",
        "'name' must be at least 2 character(s) long",
        "'age' must be an integer",
        "'mail' must be a valid email",
        "'color' must be one of red, blue",
    ]
    assert form_problems(schema, {"action": "decline"}) == []
    fine = {"action": "accept", "content": {"name": "xy", "ok": True, "age": 150}}
    assert form_problems(schema, fine) == []


def test_integers_beyond_a_float_are_checked_not_raised_on() -> None:
    """A 400-digit integer parses (the wire reads integers exactly); checking it against
    its schema must not overflow (it raised OverflowError, after the call had resumed)."""
    from gateway.protocol import jsonrpc
    from gateway.protocol.inputs import form_problems

    huge = jsonrpc.loads(b'{"age": 1' + b"0" * 400 + b"}")
    bounded = {"type": "object", "properties": {"age": {"type": "integer", "maximum": 150}}}
    free = {"type": "object", "properties": {"age": {"type": "integer"}}}
    number = {"type": "object", "properties": {"age": {"type": "number", "minimum": 0.5}}}
    answer = {"action": "accept", "content": huge}
    assert form_problems(bounded, answer) == ["'age' must be at most 150"]
    assert form_problems(free, answer) == []
    assert form_problems(number, answer) == []
    negative = {"action": "accept", "content": {"age": -(10**400)}}
    assert form_problems(number, negative) == ["'age' must be at least 0.5"]
