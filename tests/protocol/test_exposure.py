"""The exposure rules, sans-IO: what a list shows and which names a client may reach."""

from __future__ import annotations

from gateway.protocol.exposure import EVERYTHING, Exposure, Globs, Shown

RULES = Exposure(
    tools=Globs(deny=("delete_*",)),
    prompts=Globs(deny=("internal_*",)),
    resources=Globs(allow=("note://public/*",)),
    shown={"read_note": Shown(name="fetch_note", title="Fetch a note", description="One note.")},
)
TOOLS = {
    "tools": [
        {"name": "read_note", "description": "server's", "annotations": {"title": "Read"}},
        {"name": "delete_note"},
        {"name": "list_notes"},
        {"name": "fetch_note"},  # the server's own tool of the name read_note is shown as
    ],
    "nextCursor": "c",
}


def test_a_list_leaves_hidden_entries_out_and_shows_tools_as_the_rules_say() -> None:
    assert RULES.view("tools/list", TOOLS) == {
        "tools": [
            {
                "name": "fetch_note",
                "title": "Fetch a note",
                "description": "One note.",
                "annotations": {"title": "Fetch a note"},
            },
            {"name": "list_notes"},
        ],
        "nextCursor": "c",
    }
    prompts = {"prompts": [{"name": "internal_x"}, {"name": "hello"}]}
    assert RULES.view("prompts/list", prompts) == {"prompts": [{"name": "hello"}]}
    resources = {"resources": [{"uri": "note://public/1"}, {"uri": "note://private/2"}]}
    assert RULES.view("resources/list", resources) == {"resources": [{"uri": "note://public/1"}]}
    templates = {
        "resourceTemplates": [{"uriTemplate": "note://public/{id}"}, {"uriTemplate": "x://{y}"}]
    }
    assert RULES.view("resources/templates/list", templates) == {
        "resourceTemplates": [{"uriTemplate": "note://public/{id}"}]
    }


def test_a_renamed_tool_answers_to_its_new_name_only_and_the_server_gets_its_own() -> None:
    assert RULES.upstream_name("tools/call", "fetch_note") == "read_note"
    assert RULES.upstream_name("tools/call", "read_note") is None
    assert RULES.upstream_name("tools/call", "delete_note") is None
    assert RULES.upstream_name("tools/call", "list_notes") == "list_notes"
    assert RULES.upstream_name("prompts/get", "internal_x") is None
    assert RULES.upstream_name("resources/read", "note://private/2") is None
    assert RULES.upstream_name("resources/read", "note://public/2") == "note://public/2"
    assert RULES.exposed_name("read_note") == "fetch_note"


def test_no_rules_show_everything_as_it_comes() -> None:
    assert EVERYTHING.everything and EVERYTHING.view("tools/list", TOOLS) is TOOLS
    assert EVERYTHING.upstream_name("tools/call", "delete_note") == "delete_note"


PREFIXED = Exposure(
    tools=Globs(deny=("delete_*",)),
    shown={"read_note": Shown(name="fetch_note")},
    prefix="notes_",
)


def test_a_prefix_is_shown_before_every_tool_and_prompt_name_and_never_before_a_uri() -> None:
    assert PREFIXED.view("tools/list", TOOLS)["tools"] == [
        {"name": "notes_fetch_note", "description": "server's", "annotations": {"title": "Read"}},
        {"name": "notes_list_notes"},
    ]
    prompts = {"prompts": [{"name": "hello"}]}
    assert PREFIXED.view("prompts/list", prompts) == {"prompts": [{"name": "notes_hello"}]}
    resources = {"resources": [{"uri": "note://public/1"}]}
    assert PREFIXED.view("resources/list", resources) == resources
    assert PREFIXED.exposed_name("read_note") == "notes_fetch_note"
    assert PREFIXED.exposed_name("list_notes") == "notes_list_notes"
    assert not PREFIXED.everything


def test_a_prefixed_name_reaches_the_server_by_its_own_name_and_a_bare_one_is_unknown() -> None:
    assert PREFIXED.upstream_name("tools/call", "notes_fetch_note") == "read_note"
    assert PREFIXED.upstream_name("tools/call", "notes_list_notes") == "list_notes"
    assert PREFIXED.upstream_name("prompts/get", "notes_hello") == "hello"
    # Without the prefix, with another's, the renamed tool's old name, a hidden one: unknown.
    for name in ("list_notes", "tickets_list_notes", "notes_read_note", "notes_delete_note"):
        assert PREFIXED.upstream_name("tools/call", name) is None
    assert PREFIXED.upstream_name("prompts/get", "hello") is None
    assert PREFIXED.upstream_name("resources/read", "note://x") == "note://x"
    # A separator inside the server's own name is kept: only the prefix is taken off.
    assert PREFIXED.upstream_name("tools/call", "notes_notes_x") == "notes_x"
