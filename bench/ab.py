"""Two checkouts of the gateway timed in the same minutes: what a change does to the goals.

    .venv/bin/python bench/ab.py --tree BEFORE --tree AFTER [--quick] [--op legacy-echo]
    .venv/bin/python bench/ab.py --tree . --python .venv/bin/python --tree . --python OTHER

`--python` (as many as `--tree`, paired in order) runs each tree's gateway on that
interpreter (a virtual environment's, with the gateway's dependencies installed) instead
of this one's.

On two shared cores a run's speed moves by the hour (see docs/performance.md), so runs of
`bench/report.py` made an hour apart cannot tell a change of a few percent from the
machine's drift. This starts one legacy server and a gateway from each tree (shipped
defaults), and measures them, with the server driven directly, in alternating batches
(`report.interleaved`): the pass-through call at 32 clients (throughput, CPU per call)
and at one client (p50), and the elicitation round trip at one client (p50) and at 16
(throughput). Each figure is printed for each tree as a ratio against the direct one,
as the goals are stated. `--op legacy-echo` times the legacy lane instead: a 2025
client's `tools/call echo` on its session through each tree's gateway against the same
server direct, at 32 clients and at 1, the server answering in JSON and then in SSE.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lifetime import run  # noqa: E402
from bench.report import (  # noqa: E402
    LEGACY_FORMS,
    Gateway,
    MakeOp,
    Variant,
    direct_echo,
    direct_greet,
    echo_to,
    greet_at,
    interleaved,
    legacy_echo,
    spread,
    tree_pythons,
    upstream,
)
from tests.peers.tooling import LegacyServer  # noqa: E402


def gateway_of(tree: Path, python: str, legacy: LegacyServer, folder: Path, name: str) -> Gateway:
    """A gateway from `tree` (its PYTHONPATH; `-P`: not the working directory's)."""
    return Gateway(
        upstream("legacy", legacy.url, pool={"min_idle": 4}),
        folder,
        name,
        env={"PYTHONPATH": str(tree)},
        launcher=[python, "-P", "-m", "gateway"],
    )


async def compare_legacy(trees: list[tuple[Path, str, str]], quick: bool, folder: Path) -> None:
    """`--op legacy-echo`: a 2025 client's `tools/call echo` through each tree's legacy
    lane against the same server direct, the server answering in JSON and then in SSE."""
    for form, json_response in LEGACY_FORMS:
        await compare_legacy_form(trees, quick, folder, form, json_response)


async def compare_legacy_form(
    trees: list[tuple[Path, str, str]], quick: bool, folder: Path, form: str, json_response: bool
) -> None:
    names = [name for _, _, name in trees]
    n, seq = (64, 200) if quick else (320, 800)
    legacy = LegacyServer(json_response=json_response)
    assert legacy.proc is not None
    server = legacy.proc.pid
    gateways = [
        gateway_of(tree, py, legacy, folder, f"{form}-tree{i}")
        for i, (tree, py, _) in enumerate(trees)
    ]

    def variants(cpu: bool) -> list[Variant]:
        return [Variant("direct", legacy_echo(legacy.url), (server,) if cpu else ())] + [
            Variant(name, legacy_echo(gw.url), (gw.pid, server) if cpu else ())
            for name, gw in zip(names, gateways, strict=True)
        ]

    try:
        echo32 = await interleaved(variants(True), 32, n)
        echo1 = await interleaved(variants(False), 1, seq)
    finally:
        for gw in gateways:
            gw.stop()
        legacy.stop()
    direct_cpu = echo32[0]["cpu_s"][0] / echo32[0]["ops"] * 1000
    print(
        f"{form} answers, direct: {echo32[0]['per_s']:.0f}/s at 32 clients, p50 "
        f"{echo1[0]['p50_ms']:.2f} ms at 1; the server's CPU per echo {direct_cpu:.3f} ms"
    )
    for i, name in enumerate(names, start=1):
        own = echo32[i]["cpu_s"][0] / echo32[i]["ops"] * 1000
        print(
            f"{name}:\n"
            f"  legacy throughput at 32 clients  {echo32[i]['per_s'] / echo32[0]['per_s']:.2f}x "
            f"({spread(echo32[i], echo32[0])})\n"
            f"  legacy p50 at 1 client           +{echo1[i]['p50_ms'] - echo1[0]['p50_ms']:.2f} ms "
            f"({spread(echo1[i], echo1[0])})\n"
            f"  CPU per legacy call              {own / direct_cpu:.3f}x ({own:.3f} ms)"
        )


async def compare(trees: list[tuple[Path, str, str]], quick: bool, folder: Path) -> None:
    legacy = LegacyServer()
    assert legacy.proc is not None
    server = legacy.proc.pid
    gateways = [
        gateway_of(tree, py, legacy, folder, f"tree{i}") for i, (tree, py, _) in enumerate(trees)
    ]
    names = [name for _, _, name in trees]
    n, seq = (64, 200) if quick else (320, 800)

    def variants(direct: MakeOp, through: Callable[[str], MakeOp], cpu: bool) -> list[Variant]:
        return [Variant("direct", direct, (server,) if cpu else ())] + [
            Variant(name, through(gw.url), (gw.pid, server) if cpu else ())
            for name, gw in zip(names, gateways, strict=True)
        ]

    try:
        echo32 = await interleaved(variants(direct_echo(legacy.url), echo_to, True), 32, n)
        echo1 = await interleaved(variants(direct_echo(legacy.url), echo_to, False), 1, seq)
        greet1 = await interleaved(variants(direct_greet(legacy.url), greet_at, False), 1, seq // 2)
        greet16 = await interleaved(variants(direct_greet(legacy.url), greet_at, False), 16, n)
    finally:
        for gw in gateways:
            gw.stop()
        legacy.stop()
    direct_cpu = echo32[0]["cpu_s"][0] / echo32[0]["ops"] * 1000
    print(
        f"direct: echo {echo32[0]['per_s']:.0f}/s at 32 clients, p50 {echo1[0]['p50_ms']:.2f} ms "
        f"at 1; greet p50 {greet1[0]['p50_ms']:.2f} ms at 1, {greet16[0]['per_s']:.0f}/s at 16; "
        f"the server's CPU per echo {direct_cpu:.3f} ms"
    )
    for i, name in enumerate(names, start=1):
        own = echo32[i]["cpu_s"][0] / echo32[i]["ops"] * 1000
        print(
            f"{name}:\n"
            f"  pass-through throughput at 32 clients  {echo32[i]['per_s'] / echo32[0]['per_s']:.2f}x\n"
            f"  pass-through p50 at 1 client           +{echo1[i]['p50_ms'] - echo1[0]['p50_ms']:.2f} ms\n"
            f"  CPU per pass-through call              {own / direct_cpu:.3f}x ({own:.3f} ms)\n"
            f"  round trip p50 at 1 client             {greet1[i]['p50_ms'] / greet1[0]['p50_ms']:.2f}x\n"
            f"  round-trip throughput at 16 clients    {greet16[i]['per_s'] / greet16[0]['per_s']:.2f}x"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path, required=True)
    parser.add_argument("--python", action="append", help="the interpreter of each tree's gateway")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--op", choices=("echo-greet", "legacy-echo"), default="echo-greet", help="what is timed"
    )
    args = parser.parse_args()
    trees = tree_pythons(parser, args.tree, args.python)
    with tempfile.TemporaryDirectory(prefix="mrtr-ab-") as tmp:
        if args.op == "legacy-echo":
            await compare_legacy(trees, args.quick, Path(tmp))
        else:
            await compare(trees, args.quick, Path(tmp))


if __name__ == "__main__":
    run(main(), fast=True)
