"""Keeper of one stdio server process group; run by the gateway as its own program.

    python -S keeper.py COMMAND [ARG ...]

The gateway starts this in a new session (process group), and the keeper starts
the server in the same group, sharing its stdin, stdout and stderr. The kernel
sends the keeper SIGTERM the moment the gateway dies, even by `kill -9`
(PR_SET_PDEATHSIG); the gateway sends it SIGTERM to close a session. Either way
the keeper ends the whole group: SIGTERM, then SIGKILL after a grace period. So
no process the server starts outlives the gateway.

It imports nothing from the gateway and nothing outside the standard library,
so it starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
GRACE_S = float(os.environ.pop("MRTR_KEEPER_GRACE_S", "2"))
PARENT = int(os.environ.pop("MRTR_KEEPER_PARENT", "0"))


def die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if PARENT and os.getppid() != PARENT:  # the gateway died before prctl took effect
        sys.exit(1)


def end_group() -> None:
    """SIGTERM to the group now, SIGKILL to whatever is left after the grace period.

    Runs in a signal handler, while `main` waits for the server; `main` carries on
    when the server exits, and the alarm ends everyone (the keeper too) if it does not.
    """
    group = os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the keeper is in the group too
    signal.signal(signal.SIGALRM, lambda signum, frame: os.killpg(group, signal.SIGKILL))
    signal.setitimer(signal.ITIMER_REAL, GRACE_S)
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> int:
    if not argv:
        print("keeper: a command is required", file=sys.stderr)
        return 2
    die_with_parent()
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"keeper: cannot start {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: end_group())
    status = child.wait()
    # The server is gone; whatever it left behind in the group goes with it.
    for pid in _others_in_group():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return status if status >= 0 else 128 - status


def _others_in_group() -> list[int]:
    group, me = os.getpgrp(), os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getpgid(int(entry)) == group:
                    found.append(int(entry))
            except ProcessLookupError:
                continue
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
