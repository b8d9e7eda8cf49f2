"""The conformance gateway's file with catalog rules that hide nothing the fixture serves
(`scripts/conformance --rules`): globs that match none of its tools, prompts or
resources, pinning that blocks, lists from the catalog. The suite must see no change.

    python tests/conformance/with_rules.py tests/conformance/gateway.yaml > rules.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RULES = {
    "expose": {
        "tools": {"deny": ["never_served_*"]},
        "prompts": {"deny": ["never_served_*"]},
        "resources": {"deny": ["never-served://*"]},
    },
    "catalog": {"ttl_s": 60, "pinning": "block"},
}


def main() -> None:
    config = yaml.safe_load(Path(sys.argv[1]).read_text())
    (upstream,) = config["upstreams"]
    upstream.update(RULES)
    yaml.safe_dump(config, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
