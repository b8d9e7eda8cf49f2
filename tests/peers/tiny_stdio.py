"""A minimal legacy MCP server over stdio, without any SDK: for process-hygiene tests.

Tools: `echo`, `big` (a text of `size` bytes), `crash` (exits in the middle of the
call), `spawn` (starts a grandchild that sleeps, and returns its pid), `ask`
(elicits a name, then greets), `pid` (its own pid), `environ` (its environment as
JSON). It prints a line to stderr at start, as real servers do. With `--linger` it
does not exit when its stdin closes (a badly behaved server): only a signal ends it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(rid: object, value: str) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": value}]}})


def call(rid: object, name: str, args: dict, lines) -> None:
    if name == "echo":
        text(rid, str(args.get("text", "")))
    elif name == "big":
        text(rid, "x" * int(args["size"]))
    elif name == "crash":
        os._exit(3)
    elif name == "pid":
        text(rid, str(os.getpid()))
    elif name == "odd_id":  # a response no one asked for, with an id that is not a scalar
        send({"jsonrpc": "2.0", "id": [1], "result": {}})
        text(rid, "still here")
    elif name == "deaf":  # stops reading its input for good
        text(rid, "not listening")
        time.sleep(3600)
    elif name == "environ":
        text(rid, json.dumps(dict(os.environ)))
    elif name == "spawn":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        text(rid, str(child.pid))
    elif name == "ask":
        send(
            {
                "jsonrpc": "2.0",
                "id": "q1",
                "method": "elicitation/create",
                "params": {"message": "Your name?", "requestedSchema": NAME_SCHEMA},
            }
        )
        for line in lines:
            answer = json.loads(line)
            if answer.get("id") == "q1":
                content = answer.get("result", {}).get("content") or {}
                text(rid, f"Hello, {content.get('name', 'nobody')}!")
                return
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "no such tool"}})


def main() -> None:
    print("tiny stdio server starting", file=sys.stderr, flush=True)
    lines = iter(sys.stdin.readline, "")
    for line in lines:
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": message["params"]["protocolVersion"],
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "tiny", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            names = ["echo", "big", "crash", "spawn", "ask", "pid", "environ", "odd_id", "deaf"]
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in names]
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
        elif method == "tools/call":
            params = message["params"]
            call(rid, params["name"], params.get("arguments") or {}, lines)
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
    if "--linger" in sys.argv:
        time.sleep(3600)


if __name__ == "__main__":
    main()
