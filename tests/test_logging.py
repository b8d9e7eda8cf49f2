"""The JSON log line: one fused step writes what structlog's own processors would."""

from __future__ import annotations

import datetime
import logging

import orjson
import pytest
import structlog
from aiohttp.http_exceptions import BadHttpMessage, ContentEncodingError
from aiohttp.web import RequestPayloadError
from structlog.testing import capture_logs

from gateway import logging as log_context
from gateway.logging import MalformedRequests, _json_line

#: The chain the fused step stands for (the shipped JSON format before it was fused).
REFERENCE = (
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.format_exc_info,
)


def reference_line(method: str, event: dict[str, object]) -> dict[str, object]:
    for processor in REFERENCE:
        event = processor(None, method, event)
    return dict(orjson.loads(structlog.processors.JSONRenderer()(None, method, event)))


def raised() -> BaseException:
    try:
        raise ValueError("the reason")
    except ValueError as exc:
        return exc


@pytest.mark.parametrize(
    ("method", "event"),
    [
        ("info", {"event": "request_served", "status": 200, "duration_ms": 0.7}),
        ("warning", {"event": "upstream_slow", "upstream": "legacy", "asked": ["a", "b"]}),
        ("warn", {"event": "old_alias"}),
        ("error", {"event": "odd_value", "value": object.__new__(type("Odd", (), {}))}),
        ("exception", {"event": "unhandled_error", "exc_info": True}),
        ("error", {"event": "failed", "exc_info": raised()}),
    ],
)
def test_the_fused_json_line_writes_what_the_processor_chain_did(method, event) -> None:
    def both() -> tuple[dict[str, object], dict[str, object]]:
        return orjson.loads(_json_line(None, method, dict(event))), reference_line(
            method, dict(event)
        )

    if event.get("exc_info") is True:  # the exception being handled is the one logged
        try:
            raise KeyError("in flight")
        except KeyError:
            fused, expected = both()
    else:
        fused, expected = both()
    stamp_fused, stamp_expected = fused.pop("timestamp"), expected.pop("timestamp")
    assert fused == expected
    if "value" in event:  # what orjson cannot serialise is written as its repr
        assert fused["value"] == repr(event["value"])
    for stamp in (stamp_fused, stamp_expected):
        assert stamp.endswith("Z")
        parsed = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert abs(datetime.datetime.now(datetime.UTC) - parsed) < datetime.timedelta(minutes=1)
    if "exc_info" in event:
        assert "Traceback" in fused["exception"] and "exc_info" not in fused


def test_a_json_line_is_one_line_of_bytes() -> None:
    line = _json_line(None, "info", {"event": "x", "text": "a\nb"})
    assert isinstance(line, bytes) and b"\n" not in line


def merged(**line: object) -> dict[str, object]:
    return dict(log_context.merge_bound(None, "info", dict(line)))


async def test_a_requests_bindings_reach_its_lines_and_tasks_but_no_other_request() -> None:
    import asyncio

    from gateway.aio import spawn

    seen: dict[str, dict[str, object]] = {}
    started = asyncio.Event()

    async def child() -> None:
        log_context.bind(round=2)  # the task's own binding stays its own
        seen["child"] = merged(event="in_task")
        started.set()

    async def request(name: str) -> None:
        log_context.clear()
        log_context.bind(request_id=name)
        if name == "a":
            task = spawn(child(), name="child")
            await started.wait()
            await task
        else:
            await started.wait()
        log_context.bind(outcome="complete")
        seen[name] = merged(event="request_served", outcome="error")  # the line's own key wins

    await asyncio.gather(request("a"), request("b"))
    assert seen["child"] == {"event": "in_task", "request_id": "a", "round": 2}
    assert seen["a"] == {"event": "request_served", "outcome": "error", "request_id": "a"}
    assert seen["b"] == {"event": "request_served", "outcome": "error", "request_id": "b"}


def test_clear_and_unbind_forget_what_was_bound() -> None:
    import contextvars

    def run() -> None:
        log_context.bind(request_id="r", call_id="c")
        log_context.unbind("call_id")
        assert merged(event="x") == {"event": "x", "request_id": "r"}
        log_context.clear()
        assert merged(event="x") == {"event": "x"}

    contextvars.Context().run(run)


def _record(exc: BaseException) -> logging.LogRecord:
    return logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        __file__,
        1,
        "Error handling request from %s",
        ("127.0.0.1",),
        (type(exc), exc, None),
    )


def test_a_request_aiohttp_could_not_parse_is_one_line_without_its_traceback() -> None:
    malformed = BadHttpMessage("Invalid header value: Authorization: Bearer s3cret")
    with capture_logs() as logs:
        assert MalformedRequests().filter(_record(malformed)) is False
    assert logs == [
        {"event": "request_malformed", "kind": "BadHttpMessage", "status": 400, "log_level": "info"}
    ]
    assert "s3cret" not in repr(logs)
    with capture_logs() as logs:  # the server's own failures still pass, traceback and all
        assert MalformedRequests().filter(_record(RuntimeError("a bug"))) is True
    assert logs == []


def test_a_body_aiohttp_could_not_decode_is_one_line_naming_the_parsers_error() -> None:
    undecodable = RequestPayloadError("400, message: Can not decode content-encoding: gzip")
    undecodable.__cause__ = ContentEncodingError("Can not decode content-encoding: gzip")
    with capture_logs() as logs:
        assert MalformedRequests().filter(_record(undecodable)) is False
    assert logs == [
        {
            "event": "request_malformed",
            "kind": "ContentEncodingError",
            "part": "body",
            "log_level": "info",
        }
    ]


def test_configure_puts_the_filter_on_aiohttps_server_log_once() -> None:
    saved = structlog.get_config()
    server_log = logging.getLogger("aiohttp.server")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        log_context.configure("info", "json")
        log_context.configure("info", "json")
        assert sum(isinstance(f, MalformedRequests) for f in server_log.filters) == 1
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
        for f in [f for f in server_log.filters if isinstance(f, MalformedRequests)]:
            server_log.removeFilter(f)


def test_a_console_line_leads_with_time_level_event_status_outcome_duration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import re

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    try:
        log_context.configure("info", "console")
        structlog.get_logger("gateway").info(
            "request_served",
            upstream="example",
            principal="anonymous",
            request_id="r-1",
            duration_ms=12.5,
            outcome="input_required",
            status=200,
            tool="create_ticket",
            call_id="c-1",
        )
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    (line,) = stream.getvalue().splitlines()
    words = line.split()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", words[0])
    assert words[1:4] == ["[info", "]", "request_served"]
    assert words[4:] == [
        "status=200",
        "outcome=input_required",
        "duration_ms=12.5",
        "tool=create_ticket",
        "call_id=c-1",
        "principal=anonymous",
        "request_id=r-1",
        "upstream=example",
    ]


def test_a_librarys_own_record_is_a_json_line_like_any_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    raw = io.BytesIO()
    monkeypatch.setattr("sys.stderr", io.TextIOWrapper(raw, write_through=True))
    try:
        log_context.configure("info", "json")
        log_context.configure("info", "json")  # the handler goes on once
        logging.getLogger("asyncio").error("Task exception was never retrieved", exc_info=raised())
        logging.getLogger("asyncio").info("below the root's level: dropped")
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    (line,) = raw.getvalue().splitlines()
    event = orjson.loads(line)
    assert (event["event"], event["level"], event["logger"]) == ("library_log", "error", "asyncio")
    assert event["message"] == "Task exception was never retrieved"
    assert "ValueError: the reason" in event["exception"]
