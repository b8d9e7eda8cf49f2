"""The front door's refusals in the audit trail, with the reason its client is not told:
no credential or a bad one, a scope missing (the route's or a tool's), the caller's rate;
never the credential itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.auth import new_api_key
from gateway.auth.errors import InsufficientScope, RateLimited, Unauthenticated
from gateway.auth.ratelimit import MemoryTokenBucket
from gateway.config import parse_config
from gateway.protocol.state import generate_key
from gateway.web.front_door import FrontDoor, build_front_doors
from tests.fakes.audit import KeptSink, kept_trail
from tests.fakes.clock import ManualClock


class NoFetcher:
    """API keys only: nothing is fetched."""

    async def get_json(self, url: str, **_: Any) -> Any:
        raise AssertionError(f"fetched {url}")


@pytest.fixture
def door(tmp_path: Path) -> tuple[FrontDoor, KeptSink, str]:
    key, entry = new_api_key("ci-bot", ["mcp"])
    (tmp_path / "keys.yaml").write_text(entry)
    config = parse_config(
        {
            "auth": {"public_url": "https://mcp.example.com", "api_keys_file": "keys.yaml"},
            "upstreams": [
                {
                    "name": "up",
                    "url": "http://up.invalid/mcp",
                    "tools": {"wipe": {"scopes": ["admin"]}},
                }
            ],
        },
        env={"MRTR_GATEWAY_SEALING_KEYS": generate_key()},
        base=tmp_path,
    )
    audit, sink = kept_trail("r1", ManualClock())
    limiter = MemoryTokenBucket(rate_per_s=0.001, burst=2, clock=lambda: 1000.0)
    doors = build_front_doors(
        config, fetcher=NoFetcher(), wall_s=lambda: 1000.0, limiter=limiter, audit=audit
    )
    return doors["up"], sink, key


async def test_a_missing_or_bad_credential_is_recorded_without_it(
    door: tuple[FrontDoor, KeptSink, str],
) -> None:
    front, sink, key = door
    with pytest.raises(Unauthenticated):
        await front.admit(None)
    with pytest.raises(Unauthenticated):
        await front.admit("Bearer mrtr_key_not-a-real-one")
    refusals = sink.of("request.refused")
    assert [(e["refusal"], e["status"], e["principal"]) for e in refusals] == [
        ("authentication", 401, None),
        ("authentication", 401, None),
    ]
    assert all(e["reason"] and e["upstream"] == "up" for e in refusals)
    assert "not-a-real-one" not in str(sink.events) and key not in str(sink.events)


async def test_a_missing_scope_and_the_rate_are_recorded_with_who_was_refused(
    door: tuple[FrontDoor, KeptSink, str],
) -> None:
    front, sink, key = door
    caller = await front.admit(f"Bearer {key}")
    with pytest.raises(InsufficientScope):
        front.check_request(caller, "tools/call", {"name": "wipe"})
    await front.admit(f"Bearer {key}")  # its burst: two
    with pytest.raises(RateLimited):
        await front.admit(f"Bearer {key}")
    scope, rate = sink.of("request.refused")
    assert (scope["refusal"], scope["status"], scope["tool"]) == ("scope", 403, "wipe")
    assert (rate["refusal"], rate["status"]) == ("rate", 429)
    for refused in (scope, rate):
        assert refused["principal"]["kind"] == "key"
        assert refused["principal"]["key_id"] == "ci-bot"
    assert key not in str(sink.events)
