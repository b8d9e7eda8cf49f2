"""What identity costs per request, with the issuer's keys cached. Measure, don't guess.

Times, in one run, the front door's work for one request:
- baseline: no `auth` section (the principal is a hash of the Authorization header);
- an RS256 access token seen for the first time (signature, iss, aud, exp, scopes), keys
  cached, and RS256/ES256 tokens seen before (verified tokens are remembered up to 60 s);
- an API key (SHA-256 and a constant-time compare);
and prints each per-request cost and its ratio to the baseline and to the gateway's
own per-request CPU (about 0.5 ms for a pass-through call, see bridge_bench).

    .venv/bin/python bench/auth_bench.py [--n 5000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from bench.lifetime import run  # noqa: E402
from gateway.auth import (  # noqa: E402
    IssuerSettings,
    RouteAuthSettings,
    build_authenticator,
    new_api_key,
    parse_api_keys,
    prime,
)
from gateway.auth.fetcher import AiohttpFetcher  # noqa: E402
from gateway.protocol import state  # noqa: E402
from tests.peers.auth_server import AuthServer  # noqa: E402


async def per_call(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(min(200, n)):  # warm up
        await fn()
    started = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - started) / n


async def main(n: int) -> None:
    issuer = await AuthServer(audience="http://127.0.0.1:8000/mcp").start()
    key, entry = new_api_key("bench", ["mcp:tools"])
    fetcher = AiohttpFetcher()
    settings = RouteAuthSettings(
        public_url="http://127.0.0.1:8000",
        path="/mcp",
        issuers=(IssuerSettings(issuer=issuer.issuer),),
        scopes=("mcp:tools",),
        api_keys=tuple(parse_api_keys(yaml.safe_load(entry))),
    )
    auth = build_authenticator(settings, fetcher=fetcher)
    assert all((await prime(auth)).values()), "the issuer's keys did not load"
    rs256 = "Bearer " + issuer.sign(kid="rsa-1")
    es256 = "Bearer " + issuer.sign(kid="ec-1")
    api_key = "Bearer " + key

    async def baseline() -> None:
        state.principal_of(rs256)

    async def check(header: str) -> None:
        identity = await auth.authenticate(header)
        auth.require(identity, auth.scopes)

    fresh = iter(["Bearer " + issuer.sign(issuer.claims(jti=f"b{i}")) for i in range(n + 200)])

    async def first_sight() -> None:  # a token never seen: the signature is checked
        await check(next(fresh))

    rows = [("no auth (hash of the header)", await per_call(baseline, n))]
    rows.append(("RS256 token, first sight", await per_call(first_sight, n)))
    seen = (("RS256 token, seen before", rs256), ("ES256 token, seen before", es256))
    for name, header in (*seen, ("API key", api_key)):
        rows.append((name, await per_call(lambda h=header: check(h), n)))
    base = rows[0][1]
    print(f"per request, n={n}, issuer keys cached ({issuer.jwks_fetches} JWKS fetch(es) in all)")
    for name, seconds in rows:
        print(
            f"  {name:32s} {seconds * 1e6:8.1f} us   {seconds / base:7.1f}x baseline   "
            f"{seconds / 0.0005:5.2f}x a 0.5 ms pass-through"
        )
    await fetcher.close()
    await issuer.down()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    run(main(parser.parse_args().n))
