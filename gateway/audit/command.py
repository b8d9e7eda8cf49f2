"""The `audit` command line's arguments (`mrtr-gateway audit tail ...`), apart from what
runs it (`gateway.audit.tail`): building the parser loads no I/O module, so that
`check-config` and `keygen` stay light (`tests/test_cli.py`).
"""

from __future__ import annotations

from typing import Any

#: The default file: where the image and the chart mount the gateway's configuration.
DEFAULT_CONFIG = "/etc/mrtr-gateway/config.yaml"


def add_parser(commands: Any) -> None:
    """`audit tail`'s command line, under the gateway's (`gateway.cli`)."""
    audit = commands.add_parser("audit", help="the audit trail: read the fleet's stream")
    actions = audit.add_subparsers(dest="action", required=True)
    read = actions.add_parser(
        "tail",
        help="print the audit stream's events (JSON lines), oldest first",
        description="Print the events of the fleet's audit stream (audit.stream), a JSON "
        "line each, oldest first.",
    )
    read.add_argument(
        "--config",
        metavar="FILE",
        default=DEFAULT_CONFIG,
        help=f"the gateway's file, for where the stream is (default {DEFAULT_CONFIG})",
    )
    read.add_argument("-f", "--follow", action="store_true", help="then wait for more")
    read.add_argument(
        "--since",
        metavar="WHEN",
        help="from then on: 90s, 10m, 2h, 1d ago, an ISO 8601 time, or a stream id",
    )
    read.add_argument(
        "-n",
        "--lines",
        type=int,
        default=20,
        metavar="N",
        help="without --since: start with the last N events (default 20)",
    )
    read.add_argument(
        "--principal",
        metavar="WHO",
        help="only a caller's: its subject, client id, API key id, issuer|subject or log id",
    )
    read.add_argument("--tool", metavar="NAME", help="only the events of calls of this tool")
    read.add_argument(
        "--kind", metavar="KIND", help="only events of this kind (call.ended) or family (task)"
    )
    read.add_argument("--call", metavar="CALL_ID", help="only the events of this call")
