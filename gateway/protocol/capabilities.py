"""Client capabilities: read the 2026 declaration, re-declare it upstream, check server requests.

The gateway initialises each upstream session with exactly the capabilities the
client declared (invariant 4), so sessions are pooled per capability set; `key`
names that set. `missing_for` says which capability a legacy server request
needs that this request's client did not declare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.errors import InvalidParams
from gateway.protocol.versions import Version


@dataclass(frozen=True, slots=True)
class ClientCaps:
    elicitation_form: bool = False
    elicitation_url: bool = False
    sampling: bool = False
    sampling_tools: bool = False
    sampling_context: bool = False
    roots: bool = False
    #: A short stable name of this capability set (the session pool's key), worked out
    #: once: a request asks for it several times.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flags = (
            ("ef", self.elicitation_form),
            ("eu", self.elicitation_url),
            ("s", self.sampling),
            ("st", self.sampling_tools),
            ("sc", self.sampling_context),
            ("r", self.roots),
        )
        object.__setattr__(self, "key", ",".join(name for name, on in flags if on) or "none")

    @classmethod
    def from_wire(cls, value: Any) -> ClientCaps:
        """Read `io.modelcontextprotocol/clientCapabilities`.

        Raises:
            InvalidParams: the declaration is not an object, or a known member is not one.
        """
        if not isinstance(value, dict):
            raise InvalidParams("clientCapabilities must be an object")
        for name in ("elicitation", "sampling", "roots", "experimental", "extensions"):
            if name in value and value[name] is not None and not isinstance(value[name], dict):
                raise InvalidParams(f"clientCapabilities.{name} must be an object")
        elicitation = value.get("elicitation")
        sampling = value.get("sampling")
        form = url = False
        if isinstance(elicitation, dict):
            form = "form" in elicitation or "url" not in elicitation  # {} means form only
            url = "url" in elicitation
        sampled = tools = context = False
        if isinstance(sampling, dict):
            sampled = True
            tools = isinstance(sampling.get("tools"), dict)
            context = isinstance(sampling.get("context"), dict)
        return _interned(form, url, sampled, tools, context, isinstance(value.get("roots"), dict))

    @classmethod
    def from_key(cls, key: str) -> ClientCaps:
        names = set() if key == "none" else set(key.split(","))
        return _interned(*(name in names for name in ("ef", "eu", "s", "st", "sc", "r")))

    def legacy_declaration(self, version: Version) -> dict[str, Any]:
        """The `capabilities` of a legacy `initialize` at `version`.

        Never declares `roots.listChanged` (2026 has no such signal) nor `tasks`.
        """
        caps: dict[str, Any] = {}
        if self.elicitation_form or self.elicitation_url:
            if version is Version.V2025_11_25:
                modes: dict[str, Any] = {}
                if self.elicitation_form:
                    modes["form"] = {}
                if self.elicitation_url:
                    modes["url"] = {}
                caps["elicitation"] = modes
            elif self.elicitation_form and version is Version.V2025_06_18:
                caps["elicitation"] = {}  # form only existed then
        if self.sampling:
            sampling: dict[str, Any] = {}
            if version is Version.V2025_11_25:
                if self.sampling_tools:
                    sampling["tools"] = {}
                if self.sampling_context:
                    sampling["context"] = {}
            caps["sampling"] = sampling
        if self.roots:
            caps["roots"] = {}
        return caps

    def missing_for(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The capabilities a server request needs beyond these, or None if covered."""
        if method == "elicitation/create":
            if params.get("mode", "form") == "url":
                return None if self.elicitation_url else {"elicitation": {"url": {}}}
            return None if self.elicitation_form else {"elicitation": {"form": {}}}
        if method == "sampling/createMessage":
            if not self.sampling:
                return {"sampling": {}}
            if ("tools" in params or "toolChoice" in params) and not self.sampling_tools:
                return {"sampling": {"tools": {}}}
            if params.get("includeContext") in ("thisServer", "allServers") and not (
                self.sampling_context
            ):
                return {"sampling": {"context": {}}}
            return None
        if method == "roots/list":
            return None if self.roots else {"roots": {}}
        return None


#: One object per capability set (at most 64): a request reads its client's set, and
#: building a frozen dataclass each time cost more than the rest of the reading.
_INTERNED: dict[tuple[bool, ...], ClientCaps] = {}


def _interned(*flags: bool) -> ClientCaps:
    caps = _INTERNED.get(flags)
    if caps is None:
        caps = _INTERNED[flags] = ClientCaps(*flags)
    return caps


#: A client that declared nothing.
NO_CAPABILITIES = _interned(*(False,) * 6)
