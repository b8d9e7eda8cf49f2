"""What a parked call costs the legacy server itself, piece by piece, with no gateway.

    .venv/bin/python bench/session_costs.py [--count 300] [--concurrency 16] [--rounds 2]

The parking goal compares the gateway's parking rate with the rate at which the legacy
server alone opens sessions. With a session per call (the default), each parked call
costs the server a session open, the session's GET stream, the call and its question;
this prints the server's CPU for each of these, driven directly by a legacy client, so
the bound they put on any gateway that gives each parked call a session of its own can
be read off: (a bare open) / (what a parked call costs). Each variant runs `--rounds`
times, each time on a fresh server (held sessions make later ones dearer), in turned
order so that the machine's drift weighs on every variant alike:

- `open`: initialize and notifications/initialized (what the report calls a session open);
- `open + GET`: the same and the session's standalone GET stream;
- `open + park`: the same as `open` and a call to `greet`, read up to its question;
- `open + GET + park`: everything a gateway's parked call has the server do.

Sessions, streams and calls are held until the variant's round ends.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bridge_bench import ACCEPT, LegacyClient  # noqa: E402
from bench.lifetime import run  # noqa: E402
from bench.report import cpu_s  # noqa: E402
from tests.peers.tooling import LegacyServer  # noqa: E402

VARIANTS = {
    "open": (False, False),
    "open + GET": (True, False),
    "open + park": (False, True),
    "open + GET + park": (True, True),
}


async def open_one(
    http: aiohttp.ClientSession, url: str, held: list[aiohttp.ClientResponse], get: bool, park: bool
) -> None:
    client = LegacyClient(http, url)
    await client.open({"elicitation": {"form": {}}})
    if get:
        headers = {**client.headers, "Accept": "text/event-stream"}
        stream = await http.get(url, headers=headers)
        held.append(stream)
        if stream.status != 200:
            raise RuntimeError(f"GET stream refused: {stream.status}")
    if park:
        body = {"jsonrpc": "2.0", "id": 99, "method": "tools/call"}
        body["params"] = {"name": "greet", "arguments": {}}
        call = await http.post(url, json=body, headers={**client.headers, "Accept": ACCEPT})
        held.append(call)
        async for line in call.content:  # up to the question: the tool now blocks on it
            if line.startswith(b"data:") and b"elicitation/create" in line:
                return
        raise RuntimeError("the call ended without asking its question")


async def measure(variant: str, count: int, concurrency: int) -> float:
    """The server's CPU (ms) per operation of `variant`, on a fresh server."""
    get, park = VARIANTS[variant]
    held: list[aiohttp.ClientResponse] = []
    gate = asyncio.Semaphore(concurrency)
    legacy = LegacyServer()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            await open_one(http, legacy.url, held, get, park)  # the server's first: imports
            before = cpu_s(legacy.proc.pid)

            async def one() -> None:
                async with gate:
                    await open_one(http, legacy.url, held, get, park)

            await asyncio.gather(*(one() for _ in range(count)))
            spent = cpu_s(legacy.proc.pid) - before
            for resp in held:
                resp.close()
    finally:
        legacy.stop()
    return 1000 * spent / count


async def main(args: argparse.Namespace) -> None:
    names = list(VARIANTS)
    costs: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(args.rounds):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            costs[name].append(await measure(name, args.count, args.concurrency))
    print(f"legacy server CPU per operation ({args.count} at {args.concurrency} at a time):")
    for name in names:
        print(f"  {name:20s} " + "  ".join(f"{ms:5.2f} ms" for ms in costs[name]))
    opened = costs["open"]
    ways = (
        ("open + GET + park", "and its GET stream (as a gateway has)"),
        ("open + park", "alone"),
    )
    for name, how in ways:
        bound = "  ".join(f"{o / p:.2f}x" for o, p in zip(opened, costs[name], strict=True))
        print(f"  a session per parked call, {how}: parks at most {bound} the open rate")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    run(main(parser.parse_args()))
