"""Summarise a conformance run's results (`-o DIR`) for the scenarios a revision scores.

    python tests/conformance/summary.py RESULTS_DIR REQUIREMENTS_YAML

The suite's own `Total:` line also counts scenarios it runs but does not score
(the tasks extension, pending ones). This prints every scenario's verdict by role and
the scored total; it exits 1 if any scored check failed, or any check of the tasks
extension's scenarios (unscored, but served by the gateway, so they must pass too).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

# Why an unscored scenario may fail behind this gateway, from the scenarios' own sources.
WHY: dict[str, str] = {}
#: Unscored scenarios that must pass all the same: the gateway serves the tasks extension.
REQUIRED_REASONS = frozenset({"extension"})


def main() -> int:
    results, requirements = Path(sys.argv[1]), yaml.safe_load(Path(sys.argv[2]).read_text())
    scored = set(requirements.get("server") or [])
    unscored = {
        e["scenario"]: e for e in requirements.get("not_scored") or [] if e.get("leg") == "server"
    }
    verdicts: dict[str, tuple[int, int, int]] = {}
    for checks_file in sorted(results.glob("*/checks.json")):
        # <role>-<scenario>-<ISO timestamp with dashes>Z
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks_file.parent.name).removeprefix(
            "server-"
        )
        checks = json.loads(checks_file.read_text())
        verdicts[scenario] = (
            sum(c["status"] == "SUCCESS" for c in checks),
            sum(c["status"] == "FAILURE" for c in checks),
            sum(c["status"] == "WARNING" for c in checks),
        )
    missing = sorted(scored - set(verdicts))
    passed = sum(verdicts[s][0] for s in scored if s in verdicts)
    failed = sum(verdicts[s][1] for s in scored if s in verdicts) + len(missing)
    warnings = sum(verdicts[s][2] for s in scored if s in verdicts)
    print(
        f"\nScored for {requirements.get('revision', Path(sys.argv[2]).stem)} (server): {len(scored)} scenarios"
    )
    for name in sorted(scored):
        p, f, w = verdicts.get(name, (0, 1, 0))
        print(
            f"  {'✓' if f == 0 else '✗'} {name}: {p} passed, {f} failed{f', {w} warnings' if w else ''}"
        )
    print("Run but not scored:")
    failing_reasons = set()
    required_failed = 0
    for name, entry in sorted(unscored.items()):
        p, f, _ = verdicts.get(name, (0, 0, 0))
        if entry.get("reason") in REQUIRED_REASONS:
            if name not in verdicts:
                f = 1  # never ran
            required_failed += f
        if f:
            failing_reasons.add(entry.get("reason", ""))
        print(f"  {'✓' if f == 0 else '✗'} {name} ({entry.get('reason')}): {p} passed, {f} failed")
    for reason in sorted(failing_reasons):
        print(f"  why the failing '{reason}' scenarios fail here: {WHY.get(reason, reason)}")
    print(f"\nTotal: {passed} passed, {failed} failed (scored scenarios; {warnings} warnings)")
    if required_failed:
        print(f"{required_failed} failed in the extension scenarios the gateway serves")
    return 1 if failed or required_failed else 0


if __name__ == "__main__":
    sys.exit(main())
