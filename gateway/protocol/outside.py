"""What the gateway answers to server messages that no client request owns, sans-IO.

A legacy server may ask something on a session no call holds (on the standalone
stream between calls, or during a plain request such as `tools/list`). No client
can be asked, so the gateway answers at once and the server never hangs:
ping is answered, elicitation cancelled, sampling refused, roots reported
unavailable, anything else unknown. Notifications need no answer.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol import jsonrpc


def answer_outside_call(message: dict[str, Any]) -> dict[str, Any] | None:
    """The response to send for a server message outside any call, or None for none."""
    method = message.get("method")
    if not isinstance(method, str) or "id" not in message:
        return None
    rid = message["id"]
    if method == "ping":
        return jsonrpc.result(rid, {})
    if method == "elicitation/create":
        return jsonrpc.result(rid, {"action": "cancel"})
    if method == "sampling/createMessage":
        return jsonrpc.error(
            rid, {"code": -1, "message": "No client request is in flight to sample for"}
        )
    return jsonrpc.error(
        rid, {"code": -32601, "message": f"{method} is not available outside a client request"}
    )
