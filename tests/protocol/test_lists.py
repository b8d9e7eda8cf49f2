"""What a caller may see of a list: one table of what each list holds, for both eras.
Entries the caller may not see are left out of a list's response, given its method or
read from its shape (a replay); anything else passes as it is (None: untouched)."""

from __future__ import annotations

import pytest

from gateway.protocol import lists, methods


def may_see(method: str, name: str | None) -> bool:
    return name not in ("increment_counter", "secret://x", "hr_review", "secret://{id}")


LISTED = {
    "tools/list": ("tools", "name", ["echo", "increment_counter"]),
    "prompts/list": ("prompts", "name", ["plain", "hr_review"]),
    "resources/list": ("resources", "uri", ["static://hello", "secret://x"]),
    "resources/templates/list": ("resourceTemplates", "uriTemplate", ["a://{b}", "secret://{id}"]),
}


def test_every_list_method_is_in_the_table_with_the_method_guarding_its_entries() -> None:
    assert set(methods.LISTS) == set(LISTED)
    for method, listed in methods.LISTS.items():
        assert (listed.member, listed.field) == LISTED[method][:2]
        assert listed.used_by in methods.INTERRUPTIBLE


@pytest.mark.parametrize("method", sorted(LISTED))
def test_a_list_answer_leaves_out_what_the_caller_may_not_see(method: str) -> None:
    member, field, names = LISTED[method]
    message = {"jsonrpc": "2.0", "id": 7, "result": {member: [{field: n} for n in names]}}
    for kept in (
        lists.filtered_message(message, method, may_see),
        lists.filtered_message(message, None, may_see),  # read from its shape (a replay)
    ):
        assert kept is not None
        assert [e[field] for e in kept["result"][member]] == names[:1]
        assert kept["id"] == 7
    assert message["result"][member] == [{field: n} for n in names]  # the input untouched


def test_the_entries_a_caller_may_see_are_asked_of_the_method_that_uses_them() -> None:
    asked: list[tuple[str, str | None]] = []

    def record(method: str, name: str | None) -> bool:
        asked.append((method, name))
        return True

    result = {"resourceTemplates": [{"uriTemplate": "a://{b}"}, {"name": "no template"}]}
    assert lists.filtered_result(result, "resources/templates/list", record) is None
    assert asked == [("resources/read", "a://{b}"), ("resources/read", None)]


def test_what_is_not_a_list_answer_or_hides_nothing_passes_untouched() -> None:
    for message in (
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "echo"}]}},
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "x"}]}},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}},
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": "not a list"}},
        "not a message",
    ):
        assert lists.filtered_message(message, "tools/list", may_see) is None
        assert lists.filtered_message(message, None, may_see) is None
    hidden = {"tools": [{"name": "increment_counter"}]}
    assert lists.filtered_result(hidden, "tools/call", may_see) is None  # not a list method
