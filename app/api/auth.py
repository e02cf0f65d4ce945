"""Who is calling: the owner every route scopes its reads and writes to.

    mode     credentials                                   owner
    -------  --------------------------------------------  -------------------------------------
    api_key  `Authorization: Bearer cwk_...` or            the key's owner (`chatworker keys`)
             `X-API-Key: cwk_...`
             `cwo_...` (an operator's key)                 an operator: the key's name
    jwt      `Authorization: Bearer <HS256 JWT>`           the token's `sub`; `exp` required,
                                                           `aud` / `iss` checked when configured;
                                                           `"chatworker_role": "operator"`: an
                                                           operator named by its `sub`
    none     nothing                                       None: every conversation, unowned
                                                           ones created (set it explicitly)

Several modes may be on at once (`api_key,jwt`): a bearer starting `cwk_` is a key, any other a
token. Every refusal is a 401 problem with `WWW-Authenticate: Bearer`.

Operators are apart from owners: an operator's credential is taken by the operator routes
(`/v1/admin`, `Operating`) and refused by every owner route (403 `operator_credential`: it holds
no conversation of its own); an owner's credential gets a 404 on the operator routes, as for a
route that does not exist. With
`CHATWORKER_API_RATE_LIMIT`, each key (and each token subject) has a request rate (`rate.py`);
auth mode `none` has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import jwt
from fastapi import Depends, Request, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.problems import ApiProblem
from app.api.rate import caller_of_key
from app.api.state import Api, ApiState
from app.client.keys import OPERATOR_PREFIX, PREFIX, KeyRefused, is_key
from app.config import API_KEY_AUTH, JWT_AUTH, NO_AUTH
from app.models import MAX_OWNER_CHARS

_bearer = HTTPBearer(auto_error=False, description="an API key (cwk_...) or an HS256 JWT")
_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
#: Where a request's scope keeps its caller once known (`admit`).
ADMITTED = "chatworker.admitted"
LEEWAY_SECONDS = 30


#: A JWT claim naming the token's holder an operator.
OPERATOR_CLAIM = "chatworker_role"


@dataclass(frozen=True)
class Caller:
    owner: str | None  # None: auth mode `none`, a trusted caller who sees everything
    operator: bool = False  # an operator's credential: `owner` is the operator's name


def refused(code: str, detail: str) -> ApiProblem:
    return ApiProblem(401, code, detail, dict(_CHALLENGE))


async def authenticate(
    request: Request,
    response: Response,
    api: Api,
    _bearer_given: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    _key_given: Annotated[str | None, Depends(_key_header)],
) -> Caller:
    """The caller (the `/v1` routes learn it before their body is read: `gate.GuardedRoute`
    calls `admit`); the credentials' parameters put the schemes in the OpenAPI document."""
    admitted: Admitted | None = request.scope.get(ADMITTED)
    if admitted is None:
        admitted = await admit(request, api)
    response.headers.update(admitted.headers)
    if admitted.caller.operator:
        raise ApiProblem(
            403,
            "operator_credential",
            "an operator's credential is taken by the operator routes (/v1/admin) only: it "
            "holds no conversation of its own",
        )
    return admitted.caller


async def operate(
    request: Request,
    response: Response,
    api: Api,
    _bearer_given: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    _key_given: Annotated[str | None, Depends(_key_header)],
) -> Caller:
    """The operator calling an operator route; an owner's credential gets the 404 of a route
    that does not exist (auth mode `none`: every caller is trusted, operators included)."""
    admitted: Admitted | None = request.scope.get(ADMITTED)
    if admitted is None:
        admitted = await admit(request, api)
    response.headers.update(admitted.headers)
    caller = admitted.caller
    if not (caller.operator or caller.owner is None):
        raise StarletteHTTPException(404)
    return caller


@dataclass(frozen=True)
class Admitted:
    caller: Caller
    headers: dict[str, str]  # the request rate's, for the answer


async def admit(request: Request, api: ApiState) -> Admitted:
    """The caller, from the request's headers alone (its body unread), kept in its scope for
    `authenticate`; past its request rate (`CHATWORKER_API_RATE_LIMIT`), 429 `rate_limited`;
    a client address past its rate of failed authentications
    (`CHATWORKER_API_AUTH_FAILURE_LIMIT`), 429 `rate_limited` instead of 401.

    On the event loop: only what may block goes to a thread (a key's lookup when the cache has
    not kept it, a rate shared through Redis), so a known key costs no thread hop."""
    try:
        caller, identity = await _identify(
            request, api, await _bearer(request), await _key_header(request)
        )
    except ApiProblem as problem:
        if problem.status == 401 and api.failures is not None:
            address = request.client.host if request.client else "unknown"
            verdict = await run_in_threadpool(api.failures.check, "fail:" + address)
            if not verdict.allowed:
                raise ApiProblem(
                    429,
                    "rate_limited",
                    f"too many failed authentications from this address (at most "
                    f"{api.settings.api_auth_failure_limit}); retry in "
                    f"{verdict.headers()['Retry-After']} s",
                    {"Retry-After": verdict.headers()["Retry-After"]},
                ) from None
        raise
    headers: dict[str, str] = {}
    if api.limiter is not None and identity is not None:
        verdict = await run_in_threadpool(api.limiter.check, identity)
        if not verdict.allowed:
            raise ApiProblem(
                429,
                "rate_limited",
                f"this credential's request rate is {api.settings.api_rate_limit}; retry in "
                f"{verdict.headers()['Retry-After']} s",
                verdict.headers(),
            )
        headers = verdict.headers()
    admitted = Admitted(caller, headers)
    request.scope[ADMITTED] = admitted
    return admitted


async def _identify(
    request: Request,
    api: ApiState,
    bearer: HTTPAuthorizationCredentials | None,
    key_header: str | None,
) -> tuple[Caller, str | None]:
    """The caller and whom its rate is counted for (a key's digest, a token's subject)."""
    modes = api.settings.api_auth
    if modes == (NO_AUTH,):
        return Caller(None), None
    presented = key_header if key_header else (bearer.credentials if bearer else None)
    if not presented:
        if request.headers.get("authorization"):
            raise refused("unauthenticated", "the Authorization header must be 'Bearer <token>'")
        raise refused(
            "unauthenticated",
            f"credentials are required ({' or '.join(_shown(mode) for mode in modes)})",
        )
    if is_key(presented) or key_header:
        if API_KEY_AUTH not in modes:
            raise refused("invalid_token", "API keys are not accepted here; send a bearer JWT")
        try:
            owner = api.keys.kept(presented)
            if owner is None:  # (the database: in a thread)
                owner = await api.chat.admin.owner_of_key(presented)
                api.keys.keep(presented, owner)
            return Caller(owner, presented.startswith(OPERATOR_PREFIX)), caller_of_key(presented)
        except KeyRefused as exc:
            raise refused(exc.code, str(exc)) from None
    if JWT_AUTH not in modes:
        raise refused("invalid_api_key", f"an API key starts with {PREFIX!r}")
    subject, operator = _holder_of_token(api, presented)
    return Caller(subject, operator), "sub:" + subject


def _holder_of_token(api: ApiState, token: str) -> tuple[str, bool]:
    settings = api.settings
    assert settings.jwt_secret is not None  # the settings refuse jwt without one
    try:
        claims = jwt.decode(
            token,
            settings.jwt_secret.get_secret_value(),
            algorithms=["HS256"],
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "sub"], "verify_aud": settings.jwt_audience is not None},
        )
    except jwt.ExpiredSignatureError:
        raise refused("token_expired", "the bearer token has expired") from None
    except jwt.InvalidTokenError as exc:
        raise refused("invalid_token", f"the bearer token is not valid: {exc}") from None
    subject = claims.get("sub")
    if (
        not isinstance(subject, str)
        or not subject
        or len(subject) > MAX_OWNER_CHARS
        or not subject.isprintable()  # (a lone surrogate is not printable either)
    ):
        raise refused("invalid_token", "the token's sub must name its owner (printable text)")
    return subject, claims.get(OPERATOR_CLAIM) == "operator"


def _shown(mode: str) -> str:
    return {API_KEY_AUTH: "an API key", JWT_AUTH: "a bearer JWT"}.get(mode, mode)


Authenticated = Annotated[Caller, Depends(authenticate)]
Operating = Annotated[Caller, Depends(operate)]
