"""Where a 2025 client's answer to the gateway's own question goes (`Questions`), as
transcripts on the in-memory bus: to the question waiting here, or to the replica its id
names (`messages.ClientAnswer`), never to anyone else; and nothing is asked while a
replica of the previous release lives."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.fleet import messages
from gateway.legacy_clients.asking import Questions
from gateway.protocol import formats
from gateway.protocol.formats import FleetLevel
from gateway.protocol.legacy_asking import question_of
from tests.fakes.clock import ManualClock
from tests.fakes.fleet import Network

SESSION = "s_0123456789abcdef"
ANSWER: dict[str, Any] = {"jsonrpc": "2.0", "result": {"action": "accept"}}


def fleet(*names: str) -> tuple[Network, dict[str, Questions]]:
    network = Network(ManualClock())
    questions = {name: Questions(network.bus(name)) for name in names}
    for name, waiting in questions.items():

        async def serve(message: messages.Message, waiting: Questions = waiting) -> None:
            assert isinstance(message, messages.ClientAnswer)
            await waiting.serve(message)

        network.join(name, serve)
    return network, questions


async def test_an_answer_that_lands_on_another_replica_reaches_the_question_waiting() -> None:
    network, questions = fleet("a~1", "b~1")
    question, answer = questions["a~1"].waiting(SESSION)
    rid = str(question)
    assert question_of(rid) == question and question.replica == "a~1"

    assert await questions["b~1"].hand(rid, SESSION, {**ANSWER, "id": rid}) == "passed"
    async with asyncio.timeout(5):
        assert await answer == {**ANSWER, "id": rid}
    assert network.delivered == [
        ("a~1", messages.ClientAnswer(rid, SESSION, {**ANSWER, "id": rid}))
    ]


async def test_an_answer_that_lands_on_the_replica_waiting_is_taken_there() -> None:
    network, questions = fleet("a~1")
    question, answer = questions["a~1"].waiting(SESSION)
    assert await questions["a~1"].hand(str(question), SESSION, ANSWER) == "taken"
    assert answer.result() == ANSWER and network.delivered == []


async def test_an_answer_nobody_waits_for_goes_nowhere() -> None:
    network, questions = fleet("a~1", "b~1")
    question, answer = questions["a~1"].waiting(SESSION)
    rid = str(question)
    # Another session's answer is not this question's, here or passed from elsewhere.
    assert await questions["a~1"].hand(rid, "s_other", ANSWER) == "unclaimed"
    await questions["a~1"].serve(messages.ClientAnswer(rid, "s_other", ANSWER))
    assert not answer.done()
    # A question ended (answered or expired) takes no answer any more.
    questions["a~1"].forget(question)
    assert await questions["a~1"].hand(rid, SESSION, ANSWER) == "unclaimed"
    # A replica gone takes nothing; an id that names nobody neither.
    network.kill("a~1")
    assert await questions["b~1"].hand(rid, SESSION, ANSWER) == "unclaimed"
    assert await questions["b~1"].hand("mrtr-ask/", SESSION, ANSWER) == "unclaimed"


def test_nothing_is_asked_while_a_replica_of_the_previous_release_lives() -> None:
    network = Network(ManualClock())
    bus = network.bus("a~1")
    bus.level = FleetLevel(settle_s=0.0)
    bus.level.observe([formats.PREVIOUS, formats.LEVEL], 0.0)
    assert not Questions(bus).open()
    bus.level.observe([formats.LEVEL], 1.0)
    assert Questions(bus).open()
