"""`subscriptions/listen` in front of a legacy server, sans-IO: the filter read, what can be
honoured, what is relayed and how it is stamped."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidParams
from gateway.protocol import listen
from gateway.protocol.call import CallMachine, ListChanged

TELLS_ALL = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def test_a_filter_is_read_with_its_uris_in_order_and_once_each() -> None:
    asked = listen.read_filter(
        {
            "notifications": {
                "toolsListChanged": True,
                "promptsListChanged": False,
                "resourceSubscriptions": ["b://x", "a://y", "b://x"],
            }
        }
    )
    assert asked == listen.ListenFilter(frozenset({"toolsListChanged"}), ("b://x", "a://y"))
    assert asked.wire() == {"toolsListChanged": True, "resourceSubscriptions": ["b://x", "a://y"]}
    assert listen.read_filter({}) == listen.ListenFilter()


@pytest.mark.parametrize(
    "notifications",
    [
        [],
        {"toolsListChanged": "yes"},
        {"resourcesListChanged": 1},
        {"resourceSubscriptions": "file:///a"},
        {"resourceSubscriptions": [""]},
        {"resourceSubscriptions": [{"uri": "x"}]},
        {
            "resourceSubscriptions": [
                f"r://{n}" for n in range(listen.MAX_RESOURCE_SUBSCRIPTIONS + 1)
            ]
        },
    ],
)
def test_a_filter_of_the_wrong_shape_is_invalid_params(notifications: Any) -> None:
    with pytest.raises(InvalidParams):
        listen.read_filter({"notifications": notifications})


def test_only_what_the_server_declares_is_honoured() -> None:
    asked = listen.ListenFilter(
        frozenset({"toolsListChanged", "promptsListChanged", "resourcesListChanged"}), ("r://a",)
    )
    assert listen.honoured(asked, TELLS_ALL) == asked
    declared = {"tools": {"listChanged": True}, "prompts": {}, "resources": {"listChanged": False}}
    assert listen.honoured(asked, declared) == listen.ListenFilter(
        frozenset({"toolsListChanged"}), ()
    )
    assert listen.honoured(asked, {"resources": {"subscribe": "yes"}}) == listen.ListenFilter()


def test_a_listen_of_several_upstreams_honours_what_some_upstream_does() -> None:
    asked = listen.ListenFilter(
        frozenset({"toolsListChanged", "promptsListChanged", "resourcesListChanged"}),
        ("b://2", "a://1", "c://3"),
    )
    notes = listen.ListenFilter(frozenset({"toolsListChanged"}), ("a://1",))
    tickets = listen.ListenFilter(frozenset({"promptsListChanged"}), ("b://2",))
    honour = listen.joined(asked, [notes, tickets, listen.ListenFilter()])
    assert honour.wire() == {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourceSubscriptions": ["b://2", "a://1"],  # the client's order; c://3 nobody's
    }
    assert listen.joined(asked, []) == listen.ListenFilter()


def test_discover_may_say_only_what_a_listen_delivers() -> None:
    assert listen.advertises(TELLS_ALL) == TELLS_ALL
    assert listen.advertises(
        {"tools": {"listChanged": False}, "resources": {"subscribe": True}}
    ) == {"resources": {"subscribe": True}}


def test_what_is_relayed_is_stamped_with_the_listen_id_and_nothing_else() -> None:
    honour = listen.ListenFilter(frozenset({"toolsListChanged"}), ("r://a",))
    assert listen.relayed(7, honour, note("notifications/tools/list_changed", _meta={"x": 1})) == (
        note("notifications/tools/list_changed", _meta={listen.SUBSCRIPTION_ID: 7})
    )
    # A sub-resource of a subscribed URI may be updated: the server's URI goes as it is.
    assert listen.relayed(7, honour, note(listen.UPDATED, uri="r://a/b")) == note(
        listen.UPDATED, _meta={listen.SUBSCRIPTION_ID: 7}, uri="r://a/b"
    )
    for message in (
        note("notifications/prompts/list_changed"),  # not asked for
        note(listen.UPDATED),  # no URI
        note("notifications/progress", progressToken=1, progress=1),
        {"jsonrpc": "2.0", "id": 3, "method": "notifications/tools/list_changed"},  # a request
        {"jsonrpc": "2.0", "id": 3, "result": {}},
    ):
        assert listen.relayed(7, honour, message) is None
    assert listen.relayed(7, listen.ListenFilter(), note(listen.UPDATED, uri="r://a")) is None


def test_the_acknowledgement_and_the_graceful_end() -> None:
    honour = listen.ListenFilter(frozenset({"promptsListChanged"}))
    assert listen.acknowledgement("l", honour) == {
        "jsonrpc": "2.0",
        "method": listen.ACKNOWLEDGED,
        "params": {
            "_meta": {listen.SUBSCRIPTION_ID: "l"},
            "notifications": {"promptsListChanged": True},
        },
    }
    assert listen.closing("l") == {"resultType": "complete", "_meta": {listen.SUBSCRIPTION_ID: "l"}}


def test_a_list_change_a_call_hears_is_news_for_the_listens_not_its_client() -> None:
    machine = CallMachine(call_id="c", method="tools/call", upstream_id="u", progress_token="p")
    assert machine.receive(note("notifications/tools/list_changed", _meta={})) == [
        ListChanged({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    ]
    assert machine.receive(note(listen.UPDATED, uri="r://a")) == []
