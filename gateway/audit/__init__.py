"""The audit trail: every call, round, task transition, refusal and 2025 session, written
once to the sinks an operator names (`audit:` in the configuration).

    trail.py    `Audit`, what the rest of the gateway is handed: `emit(event)` stamps an
                event (`gateway.protocol.audit`, the schema) and hands it to every sink,
                never waiting and never raising
    backlog.py  what a sink holds while it cannot write: bounded, the oldest dropped
                beyond, each drop counted and said in the log
    sinks.py    the log stream (`audit` lines) and a file (JSON lines, appended,
                reopened on SIGHUP)
    stream.py   a Redis stream the fleet shares (`XADD`, its length bounded)
    tail.py     `mrtr-gateway audit tail`: the stream read, filtered, followed
    command.py  that command's arguments (loading no I/O module)
    metrics.py  events written, dropped and held, per sink
    build.py    the trail of a configuration

Writing an event never delays nor fails a client's call: a sink takes a line and
returns; what it cannot write now waits in its backlog, bounded. This package's own
namespace imports nothing, so that `gateway.audit.command` stays light.
"""
