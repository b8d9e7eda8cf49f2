"""A `calling` seam for tests that asks a 2025 client a question of the gateway's own
(`RequestServed.asker`) before a call of `echo` goes upstream, as an approval would: the
client must accept with `approve` true, else the call is refused (`NotApproved`)."""

from __future__ import annotations

from typing import Any

from gateway.errors import RpcError
from gateway.seams import RequestServed

APPROVAL = "Let the gateway call echo?"
SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}},
    "required": ["approve"],
}


class NotApproved(RpcError):
    code = -32001
    http_status = 403
    default_message = "The call was not approved"


async def approving(served: RequestServed, params: dict[str, Any]) -> dict[str, Any]:
    if served.method != "tools/call" or params.get("name") != "echo":
        return params
    asker = served.asker
    if asker is None or asker.declared("elicitation") is False:
        raise NotApproved("this client cannot be asked")
    answer = await asker.ask("elicitation/create", {"message": APPROVAL, "requestedSchema": SCHEMA})
    result = answer.get("result") or {}
    content = result.get("content") or {}
    if result.get("action") != "accept" or content.get("approve") is not True:
        raise NotApproved()
    return params
