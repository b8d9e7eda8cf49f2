"""The audit trail of a configuration: its sinks, its content policy, its metrics.

The Redis stream gets a client of its own (`owns_client`) unless it is handed one;
nothing connects until the writer sends.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from gateway.audit.metrics import AuditMetrics
from gateway.audit.sinks import FileSink, LogSink, Sink
from gateway.audit.stream import StreamSink
from gateway.audit.trail import OFF, Audit
from gateway.clock import Clock
from gateway.config.audit import AuditConfig
from gateway.store.redis_client import RedisClient, connect


def build_audit(
    config: AuditConfig | None,
    *,
    replica: str,
    clock: Clock,
    registry: CollectorRegistry | None = None,
    client: RedisClient | None = None,
    log_salt: bytes = b"",
) -> Audit:
    """The trail `config` asks for (`OFF` without one). `client`: a client of the
    stream's Redis to share (else one is made).

    Raises:
        ConfigError: the stream's URL is not a form the client knows.
    """
    if config is None:
        return OFF
    metrics = AuditMetrics(registry)
    sinks: list[Sink] = []
    if config.log:
        sinks.append(LogSink(metrics))
    if config.file is not None:
        sinks.append(
            FileSink(config.file.path, bound=config.buffer_events, metrics=metrics, clock=clock)
        )
    stream = config.stream
    if stream is not None:
        owned = client is None
        sinks.append(
            StreamSink(
                connect(stream.url) if client is None else client,
                stream.key,
                max_len=stream.max_len,
                bound=config.buffer_events,
                metrics=metrics,
                clock=clock,
                owns_client=owned,
            )
        )
    return Audit(
        replica=replica,
        sinks=sinks,
        policy=config.policy,
        clock=clock,
        metrics=metrics,
        log_salt=log_salt,
    )
