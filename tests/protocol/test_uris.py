"""Resource URIs keyed as a server finds them (`gateway.protocol.uris`)."""

from __future__ import annotations

import pytest

from gateway.protocol.uris import normal


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("STATIC://hello", "static://hello"),
        ("Static://hello", "static://hello"),
        ("static://HELLO", "static://hello"),  # hosts compared without case, every scheme
        (" static://hello\n", "static://hello"),  # the ends trimmed, as WHATWG does
        ("sta\ttic://hel\nlo", "static://hello"),  # tabs and newlines dropped anywhere
        ("FILE:///x", "file:///x"),
        ("file:///d/./x", "file:///d/x"),
        ("file:///d/e/../x", "file:///d/x"),
        ("file:///d/%2e%2E/x", "file:///x"),  # escaped dots are dots
        ("file://localhost/d/x", "file:///d/x"),
        ("https://Host:443/a/../x", "https://host/x"),
        ("https://host:/x", "https://host/x"),  # an empty port
        ("http://h:0080/p", "http://h/p"),
        ("http://h:8080/p", "http://h:8080/p"),  # not the default: kept
        ("http:host/p", "http://host/p"),  # a special scheme's slashes are optional
        ("http:\\\\host\\p", "http://host/p"),  # and may be backslashes
        ("https://h", "https://h/"),  # an empty path is /
        ("https://h/%7euser", "https://h/~user"),  # unreserved escapes decoded
        ("https://h/a%2fb", "https://h/a%2Fb"),  # others kept, in upper case
        ("https://%48ost/", "https://host/"),  # escapes in a host decoded
        ("https://\uff28\uff2f\uff33\uff34/x", "https://host/x"),  # full-width, by IDNA
        ("https://[::1]:443/", "https://[::1]/"),
        ("res://x?q=%41#F", "res://x?q=A#F"),
        ("https://u:p@H/", "https://u:p@h/"),
    ],
)
def test_spellings_a_server_reads_as_one_uri_have_one_key(spelling: str, key: str) -> None:
    assert normal(spelling) == key
    assert normal(key) == key  # a key is its own key


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("file:///Secret", "file:///secret"),  # paths keep their case
        ("static://hello", "static://hello/"),
        ("https://h/a%2Fb", "https://h/a/b"),  # an escaped slash is not a separator
        ("http://h:8080/p", "http://h/p"),
        ("static://hello", "static:hello"),
        ("res://x?q=1", "res://x?q=2"),
    ],
)
def test_different_uris_keep_different_keys(one: str, other: str) -> None:
    assert normal(one) != normal(other)
