"""Resource URIs in the form a server looks them up in, so that a rule set on one URI
(its scopes, its mode) binds however a client spells it.

A legacy server parses `resources/read`'s `uri` before it looks the resource up (mcp 1.x
through pydantic's URL type, the TypeScript SDK through `new URL`: both the WHATWG URL
parser), so `STATIC://hello`, `https://Host:443/a/../b` and `file:///d/./x` reach the
resources `static://hello`, `https://host/b` and `file:///d/x`. `normal` maps a URI to a
key in which every spelling such a parser treats as one URI is one key. Where the parsers
and RFC 3986 differ it errs towards merging (a host compared without case for every
scheme, say): two URIs it wrongly merges only make a rule bind one URI more, while one
it wrongly told apart would let a client step around the rule.

Pure: no I/O.
"""

from __future__ import annotations

import re

#: The schemes WHATWG parses as hierarchical with a host, and their default ports.
_SPECIAL = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21", "file": ""}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(.*)\Z", re.S)
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PORT = re.compile(r":([0-9]*)\Z")


def normal(uri: str) -> str:
    """The key of `uri` (see the module): scheme and host without case, default and empty
    ports dropped, dot segments resolved, escapes of unreserved characters decoded and
    every other escape in upper case; tabs and newlines dropped and the ends trimmed, as
    the WHATWG parser does."""
    text = _TAB_OR_NEWLINE.sub("", uri).strip(_C0_AND_SPACE)
    match = _SCHEME.match(text)
    if match is None:
        return _escapes(text)
    scheme, rest = match[1].lower(), match[2]
    rest, hash_, fragment = rest.partition("#")
    rest, question, query = rest.partition("?")
    special = scheme in _SPECIAL
    if special:
        rest = rest.replace("\\", "/")
    if special and scheme != "file":
        # WHATWG skips any run of slashes before a special URL's host ("http:host",
        # "http:///host" and "http://host" are one URL).
        authority, slash, path = rest.lstrip("/").partition("/")
        prefix, path = "//" + _authority(scheme, authority), slash + path
    elif rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        prefix, path = "//" + _authority(scheme, authority), slash + path
    else:
        prefix, path = ("//" if scheme == "file" else ""), rest
    if special and not path.startswith("/"):
        path = "/" + path
    path = _escapes(path)
    if path.startswith("/"):
        path = _without_dots(path)
    tail = (question + _escapes(query)) + (hash_ + _escapes(fragment))
    return f"{scheme}:{prefix}{path}{tail}"


def _authority(scheme: str, authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    port = ""
    if not host.endswith("]"):  # an IPv6 literal's colons are not a port's
        found = _PORT.search(host)
        if found is not None:
            host, port = host[: found.start()], str(int(found[1])) if found[1] else ""
    if port == _SPECIAL.get(scheme):
        port = ""
    host = _host(_escapes(host, decode_all=True))
    if scheme == "file" and host == "localhost":
        host = ""
    return f"{_escapes(userinfo)}{at}{host}{':' + port if port else ''}"


def _host(host: str) -> str:
    """A host without case; a name with letters beyond ASCII by IDNA's mapping (full-width
    letters and case folded, as a URL parser's domain-to-ASCII does)."""
    if host.isascii():
        return host.lower()
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return host.casefold()


def _escapes(text: str, *, decode_all: bool = False) -> str:
    """Escapes of unreserved characters (or, for a host, of every ASCII character)
    decoded; the rest in upper case."""

    def one(match: re.Match[str]) -> str:
        byte = int(match[1], 16)
        if byte in _UNRESERVED or (decode_all and 0x20 < byte < 0x7F):
            return chr(byte)
        return "%" + match[1].upper()

    return _ESCAPE.sub(one, text) if "%" in text else text


def _without_dots(path: str) -> str:
    """RFC 3986 §5.2.4's removal of `.` and `..` segments (escaped dots are decoded by
    then, as the WHATWG parser counts them too)."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment not in (".", ".."):
            out.append(segment)
        elif segment == ".":
            if last:
                out.append("")
        else:
            if out:
                out.pop()
            if last:
                out.append("")
    return "/" + "/".join(out)
