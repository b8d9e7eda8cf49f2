"""Reading the audit trail's section: where events go and what of content they keep.

    audit:
      log: true                                  # `audit` lines on the log stream
      file: {path: /var/log/mrtr/audit.jsonl}    # JSON lines, reopened on SIGHUP
      stream: {name: audit, max_len: 100000}     # a Redis stream the fleet shares (the store's)
      include_arguments: false                   # content: off by default
      redact: ['(?i)"password":"[^"]*"']

Absent, there is no audit trail. Present, it names at least one sink. Everything that
can be checked without the network is checked here (a file's folder exists, a pattern
compiles, a stream has a Redis), so `check-config` names the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.section import Section, expand_env
from gateway.errors import ConfigError
from gateway.protocol.audit import ContentPolicy

#: The Redis URL schemes a stream may live at (the store's own).
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+sentinel://", "redis+cluster://")
_STREAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditFileConfig:
    path: str = field(default="", metadata={"default": "required"})
    """The file events are appended to, a JSON object a line; reopened on `SIGHUP`
    (after logrotate moved it away). Its folder must exist; a relative path is read from
    the configuration file's folder."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditStreamConfig:
    url: str = field(default="", metadata={"default": "store.url"})
    """The Redis holding the stream (the forms of `store.url`; may use `${VAR}`); absent:
    the store's, which must then be Redis."""
    name: str = "audit"
    """The stream's name; its key is `<store.key_prefix>{<name>}:events`, what
    `mrtr-gateway audit tail` and a SIEM's shipper read."""
    max_len: int = 100_000
    """About how many events the stream keeps (`XADD MAXLEN ~`): older ones are trimmed,
    so ship them elsewhere before (operations.md)."""
    key: str = field(default="", metadata={"yaml": None})
    """The stream's key (worked out from `name` and `store.key_prefix`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    log: bool = False
    """Write each event to the log stream (stderr) as an `audit` line, whatever
    `logging.level` says."""
    file: AuditFileConfig | None = None
    """Append each event to a file (JSON lines)."""
    stream: AuditStreamConfig | None = None
    """Add each event to a Redis stream that every replica writes to (`XADD`)."""
    buffer_events: int = 10_000
    """Events each sink holds while it cannot write (Redis out of reach, a disk full),
    written when it can again; past it the oldest are dropped, counted
    (`mrtr_audit_dropped_total`) and said in the log (`audit_events_dropped`)."""
    include_arguments: bool = False
    """Record a call's arguments (`call.started`)."""
    include_questions: bool = False
    """Record what a question asks (its message, schema or URL: `round.asked`)."""
    include_answers: bool = False
    """Record what an answer holds (an accepted elicitation's content, a sampling or
    roots answer: `round.answered`)."""
    include_results: bool = False
    """Record a call's result and an error's message (`call.ended`)."""
    redact: tuple[re.Pattern[str], ...] = ()
    """Regular expressions (Python's) matched against recorded content, as its compact
    JSON text; each match is replaced by `[redacted]`."""
    max_value_bytes: int = 1024
    """The most bytes of one recorded value (after `redact`); beyond it the value is cut
    (`truncated: true`)."""

    @property
    def policy(self) -> ContentPolicy:
        """What of content events keep, and how."""
        return ContentPolicy(
            arguments=self.include_arguments,
            answers=self.include_answers,
            results=self.include_results,
            questions=self.include_questions,
            redact=self.redact,
            max_bytes=self.max_value_bytes,
        )

    @property
    def sinks(self) -> tuple[str, ...]:
        """The sinks on, by name: `log`, `file`, `stream`."""
        on = (("log", self.log), ("file", self.file), ("stream", self.stream))
        return tuple(name for name, given in on if given)


def audit_line(audit: AuditConfig | None) -> str:
    """What `check-config` says of the audit trail: its sinks and the content it keeps
    (never a Redis URL's credentials)."""
    if audit is None:
        return "audit trail: off (no audit section)"
    sinks = []
    if audit.log:
        sinks.append("the log stream (audit lines)")
    if audit.file is not None:
        sinks.append(f"file {audit.file.path}")
    if audit.stream is not None:
        sinks.append(f"Redis stream {audit.stream.key} at {shown_url(audit.stream.url)}")
    kept = [
        name
        for name, on in (
            ("arguments", audit.include_arguments),
            ("questions", audit.include_questions),
            ("answers", audit.include_answers),
            ("results", audit.include_results),
        )
        if on
    ]
    content = (
        f"{', '.join(kept)} (through {len(audit.redact)} redact patterns, "
        f"at most {audit.max_value_bytes} bytes each)"
        if kept
        else "none"
    )
    return f"audit trail: {'; '.join(sinks)}; content recorded: {content}"


def shown_url(url: str) -> str:
    """A Redis URL without its credentials, to be shown."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}" if sep else url


def stream_key(prefix: str, name: str) -> str:
    """The key of the stream named `name` under key prefix `prefix` (in braces: one
    Cluster slot for whatever keys of the stream's may come)."""
    return f"{prefix}{{{name}}}:events"


def parse_audit(
    sec: Section,
    base: Path,
    env: Mapping[str, str],
    store_url: str | None,
    key_prefix: str,
    *,
    present: bool,
) -> AuditConfig | None:
    """The `audit` section; None when it is absent (`present`: the file names it, if
    only as `audit:` or `audit: {}`, which name no sink and are refused). `store_url` is
    the store's URL (None when the store's own section was refused: no default is then
    checked).

    Raises:
        ConfigError
    """
    if not present:
        sec.done()
        return None
    values: dict[str, Any] = sec.scalars(AuditConfig)
    if sec.has("file"):
        values["file"] = _file(sec.section("file"), base)
    if sec.has("stream"):
        values["stream"] = _stream(sec.section("stream"), env, store_url, key_prefix)
    values["redact"] = _patterns(sec.raw("redact"), sec.at("redact"))
    sec.done()
    config = AuditConfig(**values)
    if not config.sinks:
        raise ConfigError(
            f"{sec.path}: name at least one sink (log: true, file: {{path: ...}} or "
            "stream: {}); leave the section out for no audit trail"
        )
    if config.max_value_bytes < 16:
        raise ConfigError(
            f"{sec.at('max_value_bytes')}: at least 16 bytes, got {config.max_value_bytes}"
        )
    return config


def _file(sec: Section, base: Path) -> AuditFileConfig:
    path = sec.get("path", str)
    sec.done()
    if not path:
        raise ConfigError(f"{sec.at('path')}: the file to append events to is required")
    where = base / path  # an absolute path stays as is
    if not where.parent.is_dir():
        raise ConfigError(
            f"{sec.at('path')}: the folder {where.parent} does not exist (mount a volume "
            "there, or name another path)"
        )
    if where.is_dir():
        raise ConfigError(f"{sec.at('path')}: {where} is a folder; name a file in it")
    return AuditFileConfig(path=str(where))


def _stream(
    sec: Section, env: Mapping[str, str], store_url: str | None, key_prefix: str
) -> AuditStreamConfig:
    # Read key by key: `key` is worked out here, never read from the file.
    values: dict[str, Any] = {}
    for key, kind in (("url", str), ("name", str), ("max_len", int)):
        value = sec.get(key, kind)
        if value is not None:
            values[key] = value
    sec.done()
    if values.get("max_len", 1) <= 0:
        raise ConfigError(f"{sec.at('max_len')}: must be greater than 0, got {values['max_len']}")
    url = values.get("url")
    if url:
        url = expand_env(url, sec.at("url"), env)
        if not url.startswith(_REDIS_SCHEMES):
            raise ConfigError(
                f"{sec.at('url')}: a Redis URL (redis://host:port/db, rediss://, unix://, "
                "redis+sentinel://, redis+cluster://)"
            )
    elif store_url is not None:
        if not store_url.startswith(_REDIS_SCHEMES):
            raise ConfigError(
                f"{sec.at('url')}: the store is in memory ({store_url}); give the Redis "
                "that holds the stream, or a Redis store.url"
            )
        url = store_url
    name = values.get("name", "audit")
    if not _STREAM_NAME.fullmatch(name):
        raise ConfigError(
            f"{sec.at('name')}: letters, digits and . _ : - (no braces), got {name!r}"
        )
    values["url"] = url or ""
    return AuditStreamConfig(**values, key=stream_key(key_prefix, name))


def _patterns(raw: Any, where: str) -> tuple[re.Pattern[str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, str) and item for item in raw):
        raise ConfigError(
            f"{where}: expected a list of regular expressions, e.g. ['(?i)bearer [a-z0-9._-]+']"
        )
    patterns = []
    for i, item in enumerate(raw):
        try:
            patterns.append(re.compile(item))
        except re.error as exc:
            raise ConfigError(f"{where}[{i}]: not a regular expression: {exc}") from exc
    return tuple(patterns)
