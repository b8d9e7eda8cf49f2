"""The ids of the gateway's own questions to a 2025 client, sans-IO.

A `calling` seam may ask a 2025 client something itself (an approval's
`elicitation/create`) before the client's call goes upstream
(`gateway.legacy_clients.asking`). The question goes on the call's response stream with
an id of the gateway's own; the client answers with a POST of its own, which may reach
any replica, and which names nothing but that id. So the id names the replica that waits
for the answer, and cannot be mistaken for a server's (which the lane passes on
upstream) nor for a tagged question's (`gateway.protocol.legacy_questions`, `mrtr-q/`):

    mrtr-ask/<nonce>/<replica>

`<nonce>` is random (url-safe base64: no `/`), one per question; `<replica>` is the
waiting replica with its incarnation (`gateway.compose`'s owner), taken whole after the
nonce's `/`. An answer is accepted only on the session the question was asked on.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

PREFIX = "mrtr-ask/"


@dataclass(frozen=True, slots=True)
class QuestionId:
    """What a gateway question's id names."""

    nonce: str
    replica: str  # the replica waiting for its answer

    def __str__(self) -> str:
        return f"{PREFIX}{self.nonce}/{self.replica}"


def new_question(replica: str) -> QuestionId:
    """A new question's id, its answer awaited on `replica`."""
    return QuestionId(secrets.token_urlsafe(16), replica)


def question_of(rid: Any) -> QuestionId | None:
    """What a JSON-RPC id names if it is a gateway question's; None for any other id (a
    server's, a tagged one, a number)."""
    if not isinstance(rid, str) or not rid.startswith(PREFIX):
        return None
    nonce, _, replica = rid[len(PREFIX) :].partition("/")
    if not nonce or not replica:
        return None
    return QuestionId(nonce, replica)


def is_question(rid: Any) -> bool:
    """Whether `rid` has the gateway questions' prefix (well formed or not): such an
    answer is the gateway's, never the server's."""
    return isinstance(rid, str) and rid.startswith(PREFIX)
