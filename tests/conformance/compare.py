"""Compare two conformance runs check by check: the same server scenarios run against the
legacy fixture directly and through the gateway's legacy lane.

    python tests/conformance/compare.py DIRECT_RESULTS GATEWAY_RESULTS

A check is its scenario, its id and its status (SUCCESS, FAILURE, WARNING, ...). Prints
every check whose status differs, and exits 1 if any does: a 2025 client must get through
the gateway what it gets from the server itself, no more and no less.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def checks(results: Path) -> dict[tuple[str, str], list[str]]:
    """Each (scenario, check id) with the statuses its checks had, in order."""
    found: dict[tuple[str, str], list[str]] = {}
    for checks_file in sorted(results.glob("*/checks.json")):
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks_file.parent.name)
        for check in json.loads(checks_file.read_text()):
            found.setdefault((scenario, check["id"]), []).append(check["status"])
    return found


def main() -> int:
    direct, gateway = checks(Path(sys.argv[1])), checks(Path(sys.argv[2]))
    differ = sorted(
        key for key in direct.keys() | gateway.keys() if direct.get(key) != gateway.get(key)
    )
    for scenario, check in differ:
        print(
            f"  ✗ {scenario} {check}: directly {direct.get((scenario, check))}, "
            f"through the gateway {gateway.get((scenario, check))}"
        )
    passed = sum(s.count("SUCCESS") for s in gateway.values())
    print(
        f"\nDirect vs gateway: {len(direct)} checks compared, {len(differ)} differ; "
        f"{passed} passed through the gateway"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
