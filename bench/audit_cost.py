"""What the audit trail's file sink costs a pass-through call: one tree, two gateways, one
without a trail and one writing every call to a file, timed in the same minutes.

    .venv/bin/python bench/audit_cost.py [--quick] [--sink file|log|stream]

One legacy server, two gateways in front of it (shipped defaults, `pool.min_idle: 4`),
the second with `audit: {file: {path: ...}}` (or the sink named), measured with the
server driven directly in alternating batches (`report.interleaved`): `tools/call echo`
at 32 clients (throughput, CPU per call) and at 1 (p50), and the elicitation round trip
at 1 client (p50). Each figure is printed for each gateway as the goals state it (a ratio
or a difference against direct), with the batch-by-batch spread of the gateway without a
trail: a change of a figure smaller than that spread is within the run's noise. The
file's size per call is printed too. `--sink stream` starts a redis-server of its own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lifetime import run  # noqa: E402
from bench.report import (  # noqa: E402
    Gateway,
    Variant,
    direct_echo,
    direct_greet,
    echo_to,
    greet_at,
    interleaved,
    spread,
    upstream,
)
from tests.peers.tooling import LegacyServer, RedisServer  # noqa: E402


def audited(config: dict[str, Any], sink: str, folder: Path, redis: str | None) -> dict[str, Any]:
    if sink == "file":
        return {**config, "audit": {"file": {"path": str(folder / "audit.jsonl")}}}
    if sink == "log":
        return {**config, "audit": {"log": True}}
    return {**config, "audit": {"stream": {"url": redis}}}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sink", choices=("file", "log", "stream"), default="file")
    args = parser.parse_args()
    n, seq = (64, 200) if args.quick else (320, 800)
    with tempfile.TemporaryDirectory(prefix="mrtr-audit-bench-") as tmp:
        folder = Path(tmp)
        legacy = LegacyServer()
        redis = RedisServer() if args.sink == "stream" else None
        assert legacy.proc is not None
        server = legacy.proc.pid
        plain = upstream("legacy", legacy.url, pool={"min_idle": 4})
        without = Gateway(plain, folder, "without")
        trail = audited(plain, args.sink, folder, redis.url if redis is not None else None)
        audit = Gateway(trail, folder, "audited")
        names = ("no trail", f"{args.sink} sink")
        gateways = (without, audit)
        try:

            def variants(direct: Any, through: Any, cpu: bool) -> list[Variant]:
                return [Variant("direct", direct, (server,) if cpu else ())] + [
                    Variant(name, through(gw.url), (gw.pid, server) if cpu else ())
                    for name, gw in zip(names, gateways, strict=True)
                ]

            echo32 = await interleaved(variants(direct_echo(legacy.url), echo_to, True), 32, n)
            echo1 = await interleaved(variants(direct_echo(legacy.url), echo_to, False), 1, seq)
            greet1 = await interleaved(
                variants(direct_greet(legacy.url), greet_at, False), 1, seq // 2
            )
        finally:
            for gw in gateways:
                gw.stop()
            legacy.stop()
            if redis is not None:
                redis.stop()
        calls = sum(r["ops"] for r in (*echo32[2:], *echo1[2:], *greet1[2:]))
        written = (folder / "audit.jsonl").stat().st_size if args.sink == "file" else 0
    direct_cpu = echo32[0]["cpu_s"][0] / echo32[0]["ops"] * 1000
    print(
        f"direct: echo {echo32[0]['per_s']:.0f}/s at 32 clients, p50 {echo1[0]['p50_ms']:.2f} "
        f"ms at 1; greet p50 {greet1[0]['p50_ms']:.2f} ms; server CPU {direct_cpu:.3f} ms/call"
    )
    for i, name in enumerate(names, start=1):
        own = echo32[i]["cpu_s"][0] / echo32[i]["ops"] * 1000
        print(
            f"{name}:\n"
            f"  pass-through throughput, 32 clients  {echo32[i]['per_s'] / echo32[0]['per_s']:.2f}x "
            f"({spread(echo32[i], echo32[0])})\n"
            f"  pass-through p50, 1 client           +{echo1[i]['p50_ms'] - echo1[0]['p50_ms']:.2f} ms "
            f"({spread(echo1[i], echo1[0])})\n"
            f"  CPU per pass-through call            {own / direct_cpu:.3f}x ({own:.3f} ms)\n"
            f"  round trip p50, 1 client             +{greet1[i]['p50_ms'] - greet1[0]['p50_ms']:.2f} ms "
            f"({spread(greet1[i], greet1[0])})"
        )
    if written:
        print(f"the file: {written / max(calls, 1):.0f} bytes a call")


if __name__ == "__main__":
    run(main())
