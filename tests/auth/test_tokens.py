"""Bearer JWTs against a real authorization server: each refusal, its status and its challenge."""

from __future__ import annotations

import pytest
from aiohttp import web

from gateway.auth import Authenticator, AuthError, InsufficientScope, Unauthenticated
from gateway.web.front import routed
from tests.auth.conftest import PRM_URL, ManualWallClock
from tests.peers.auth_server import AuthServer, make_key

MISSING = f'Bearer resource_metadata="{PRM_URL}", scope="mcp:tools"'
INVALID = f'Bearer error="invalid_token", resource_metadata="{PRM_URL}", scope="mcp:tools"'


async def refused(authenticator: Authenticator, header: str | None) -> AuthError:
    with pytest.raises(AuthError) as caught:
        await authenticator.authenticate(header)
    return caught.value


async def test_a_good_token_gives_the_subject_its_scopes_and_client(
    authenticator: Authenticator, auth_server: AuthServer
) -> None:
    identity = await authenticator.authenticate("Bearer " + auth_server.sign())
    assert identity.kind == "jwt"
    assert identity.principal.key == f"jwt:{auth_server.issuer}|alice|test-client"
    assert identity.scopes == {"mcp:tools", "mcp:read"}
    assert identity.client_id == "test-client"


@pytest.mark.parametrize(
    ("client", "key"),
    [
        ({"azp": "app", "client_id": "other"}, "|alice|app"),  # OpenID Connect's azp first
        ({"client_id": "other"}, "|alice|other"),
        ({"azp": 7, "client_id": "other"}, "|alice|other"),
        ({"azp": "", "client_id": None}, "|alice"),
        ({"client_id": None}, "|alice"),
    ],
)
async def test_the_principal_names_the_application_the_token_was_issued_to(
    authenticator: Authenticator, auth_server: AuthServer, client: dict, key: str
) -> None:
    identity = await authenticator.authenticate(
        "Bearer " + auth_server.sign(auth_server.claims(**client))
    )
    assert identity.principal.key == f"jwt:{auth_server.issuer}{key}"


@pytest.mark.parametrize(
    ("kid", "alg"),
    [
        ("rsa-1", "RS256"),
        ("rsa-1", "RS512"),
        ("rsa-1", "PS256"),
        ("ec-1", "ES256"),
        ("ed-1", "EdDSA"),
    ],
)
async def test_every_algorithm_of_the_keys_type_is_accepted(
    authenticator: Authenticator, auth_server: AuthServer, kid: str, alg: str
) -> None:
    identity = await authenticator.authenticate("Bearer " + auth_server.sign(kid=kid, alg=alg))
    assert identity.principal.subject == "alice"


@pytest.mark.parametrize("header", [None, "", "   ", "Basic YWxpY2U6cHc=", "Negotiate abc"])
async def test_no_bearer_credential_is_401_without_an_error_code(
    authenticator: Authenticator, header: str | None
) -> None:
    error = await refused(authenticator, header)
    assert isinstance(error, Unauthenticated) and not error.token_given
    assert error.http_status == 401
    assert error.headers == {"WWW-Authenticate": MISSING}


def bad_tokens(server: AuthServer) -> dict[str, tuple[str, str]]:
    """Each deliberately bad token and the reason it must be refused for."""
    stranger = make_key("rsa-1", "RSA")  # same kid, a key the issuer never published
    good = server.sign()
    head, payload, signature = good.split(".")
    forged = server.sign(server.claims(sub="mallory")).split(".")[1]
    return {
        "garbage": ("not-a-jwt", "malformed"),
        "two words": ("abc def", "malformed bearer token"),
        "wrong audience": (
            server.sign(server.claims(aud="https://other.example/mcp")),
            "wrong audience",
        ),
        "wrong issuer": (server.sign(server.claims(iss="https://evil.example")), "not trusted"),
        "bad signature": (server.sign(key=stranger), "bad signature"),
        "payload swapped": (f"{head}.{forged}.{signature}", "bad signature"),
        "alg none": (server.unsigned_token(), "alg 'none' is not accepted"),
        "HS256 keyed with the RSA public key": (
            server.hs256_with_public_key(),
            "alg 'HS256' is not accepted",
        ),
        "EC alg on the RSA key": (
            server.sign(kid="rsa-1", key=server.keys["ec-1"]),
            "alg ES256 does not fit the RSA key",
        ),
        "unknown kid": (
            server.sign(key=server.keys["rsa-1"], headers={"kid": "nope"}),
            "unknown kid",
        ),
        "no kid": (server.sign(headers={"kid": None}), "no kid"),
        "no sub": (server.sign(server.claims(sub=None)), "missing claim sub"),
        "no exp": (server.sign(server.claims(exp=None)), "missing claim exp"),
        "no aud": (server.sign(server.claims(aud=None)), "missing claim aud"),
        "empty sub": (server.sign(server.claims(sub="")), "sub is not a non-empty string"),
        "exp not a number": (server.sign(server.claims(exp="soon")), "claim exp is not a number"),
        "scope not a string": (server.sign(server.claims(scope=7)), "scope is neither"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "garbage",
        "two words",
        "wrong audience",
        "wrong issuer",
        "bad signature",
        "payload swapped",
        "alg none",
        "HS256 keyed with the RSA public key",
        "EC alg on the RSA key",
        "unknown kid",
        "no kid",
        "no sub",
        "no exp",
        "no aud",
        "empty sub",
        "exp not a number",
        "scope not a string",
    ],
)
async def test_a_bad_token_is_401_invalid_token_for_its_own_reason(
    authenticator: Authenticator, auth_server: AuthServer, case: str
) -> None:
    token, reason = bad_tokens(auth_server)[case]
    error = await refused(authenticator, "Bearer " + token)
    assert isinstance(error, Unauthenticated) and error.token_given
    assert error.http_status == 401
    assert error.headers == {"WWW-Authenticate": INVALID}
    assert reason in error.reason
    assert token not in str(error) and token not in error.reason


async def test_expiry_is_checked_on_the_injected_clock_with_leeway(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    token = "Bearer " + auth_server.sign(auth_server.claims(exp=int(clock()) + 300))
    clock.advance(300 + 59)  # past exp, inside the 60 s leeway
    await authenticator.authenticate(token)
    clock.advance(1)
    error = await refused(authenticator, token)
    assert error.http_status == 401 and error.headers == {"WWW-Authenticate": INVALID}
    assert error.reason.endswith("expired")


async def test_a_token_not_yet_valid_is_refused_until_its_nbf_less_leeway(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    token = "Bearer " + auth_server.sign(auth_server.claims(nbf=int(clock()) + 120))
    error = await refused(authenticator, token)
    assert error.http_status == 401 and error.headers == {"WWW-Authenticate": INVALID}
    assert error.reason.endswith("not yet valid (nbf)")
    clock.advance(60)  # nbf - leeway
    await authenticator.authenticate(token)


async def test_a_token_issued_in_the_future_is_refused(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    token = "Bearer " + auth_server.sign(auth_server.claims(iat=int(clock()) + 120))
    error = await refused(authenticator, token)
    assert error.reason.endswith("issued in the future (iat)")


async def test_a_refreshed_token_of_the_same_subject_is_the_same_principal(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    first = await authenticator.authenticate("Bearer " + auth_server.sign())
    clock.advance(250)
    refreshed = await authenticator.authenticate(
        "Bearer " + auth_server.sign(kid="ec-1", alg="ES256")
    )
    bob = await authenticator.authenticate(
        "Bearer " + auth_server.sign(auth_server.claims(sub="bob"))
    )
    assert refreshed.principal == first.principal
    assert refreshed.principal.key == first.principal.key
    assert bob.principal.key != first.principal.key


async def test_scopes_come_from_scope_or_from_scp_as_a_list_or_a_string(
    authenticator: Authenticator, auth_server: AuthServer
) -> None:
    as_list = auth_server.claims(scope=None, scp=["mcp:tools", "mcp:admin"])
    as_string = auth_server.claims(scope=None, scp="mcp:tools mcp:read")
    got_list = await authenticator.authenticate("Bearer " + auth_server.sign(as_list))
    got_string = await authenticator.authenticate("Bearer " + auth_server.sign(as_string))
    assert got_list.scopes == {"mcp:tools", "mcp:admin"}
    assert got_string.scopes == {"mcp:tools", "mcp:read"}


async def test_a_token_lacking_a_scope_is_403_naming_every_scope_needed(
    authenticator: Authenticator, auth_server: AuthServer
) -> None:
    identity = await authenticator.authenticate("Bearer " + auth_server.sign())
    authenticator.require(identity, ["mcp:tools"])  # held: no refusal
    with pytest.raises(InsufficientScope) as caught:
        authenticator.require(identity, ["mcp:tools", "mcp:admin"])
    error = caught.value
    assert error.http_status == 403
    assert error.missing == {"mcp:admin"}
    assert error.headers == {
        "WWW-Authenticate": (
            f'Bearer error="insufficient_scope", scope="mcp:admin mcp:tools", '
            f'resource_metadata="{PRM_URL}"'
        )
    }


async def test_a_token_without_the_routes_scope_keeps_the_scopes_it_holds_in_the_challenge(
    authenticator: Authenticator, auth_server: AuthServer
) -> None:
    identity = await authenticator.authenticate(
        "Bearer " + auth_server.sign(auth_server.claims(scope="mcp:read"))
    )
    with pytest.raises(InsufficientScope) as caught:
        authenticator.require(identity, authenticator.scopes)
    assert 'scope="mcp:tools"' in caught.value.headers["WWW-Authenticate"]


async def test_refusals_reach_the_wire_as_the_gateways_front_answers_them(
    aiohttp_client, authenticator: Authenticator, auth_server: AuthServer
) -> None:
    async def handler(request: web.Request) -> web.Response:
        identity = await authenticator.authenticate(request.headers.get("Authorization"))
        authenticator.require(identity, ["mcp:tools", "mcp:admin"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/mcp", routed(handler, ["POST"]))
    client = await aiohttp_client(app)
    token = auth_server.sign()

    missing = await client.post("/mcp")
    expired = await client.post(
        "/mcp", headers={"Authorization": "Bearer " + auth_server.sign(auth_server.claims(exp=1))}
    )
    short = await client.post("/mcp", headers={"Authorization": "Bearer " + token})

    assert missing.status == 401 and missing.headers["WWW-Authenticate"] == MISSING
    assert expired.status == 401 and expired.headers["WWW-Authenticate"] == INVALID
    assert short.status == 403
    assert short.headers["WWW-Authenticate"].startswith('Bearer error="insufficient_scope"')
    body = await expired.text()
    assert "expired" not in body and auth_server.issuer not in body


async def test_a_verified_token_is_remembered_for_at_most_a_minute(
    authenticator: Authenticator,
    auth_server: AuthServer,
    clock: ManualWallClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verifier = authenticator.jwt
    assert verifier is not None
    checks: list[str] = []
    real = verifier._verify

    async def counted(token: str):  # type: ignore[no-untyped-def]
        checks.append(token)
        return await real(token)

    monkeypatch.setattr(verifier, "_verify", counted)
    token = "Bearer " + auth_server.sign(auth_server.claims(exp=int(clock()) + 3600))
    for _ in range(3):
        assert (await authenticator.authenticate(token)).principal.subject == "alice"
    assert len(checks) == 1  # the signature was checked once
    clock.advance(61)
    await authenticator.authenticate(token)
    assert len(checks) == 2  # and again once the minute was over


async def test_an_identity_says_when_its_token_stops_being_accepted(
    authenticator: Authenticator, auth_server: AuthServer, clock: ManualWallClock
) -> None:
    """A listen stream outlives the request that showed the token: it ends then."""
    exp = int(clock()) + 300
    identity = await authenticator.authenticate(
        "Bearer " + auth_server.sign(auth_server.claims(exp=exp))
    )
    assert authenticator.jwt is not None
    assert identity.expires_at == exp + authenticator.jwt.leeway_s
