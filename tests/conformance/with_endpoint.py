"""The conformance gateway's file as an endpoint of two upstreams (`scripts/conformance
--endpoint`): the fixture and a second legacy server, the tests' own mcp 1.x server
(`tests/peers/legacy_server.py`, at `SECOND_URL`), on the fixture's path with bare names
(`prefix: none`), the fixture first (some scenarios take the first tool or resource
listed). The suite must see no change.

The second server's names clash with none of the fixture's but `greet` (both have one),
which the second's exposure rules hide: a name two upstreams show would be served by
neither.

    python tests/conformance/with_endpoint.py tests/conformance/gateway.yaml > endpoint.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

SECOND = {
    "name": "second",
    "url": "${SECOND_URL}",
    "expose": {"tools": {"deny": ["greet"]}},
}


def main() -> None:
    config = yaml.safe_load(Path(sys.argv[1]).read_text())
    (fixture,) = config["upstreams"]
    path = fixture.pop("path")
    config["upstreams"].append(SECOND)
    config["endpoints"] = [
        {"path": path, "upstreams": [fixture["name"], SECOND["name"]], "prefix": "none"}
    ]
    yaml.safe_dump(config, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
