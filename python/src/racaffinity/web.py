"""WSGI and ASGI middleware for seed 001's session routing tokens (WebLogic's
primary and backup carried in the session id).

Each request's token comes from a cookie; `Cluster.route_token` decides the
node (the primary, or the promoted backup when the primary is gone) and the
middleware hands that decision to the application, then sends the rewritten
cookie only when the routing data changed. A request without a token (or with
a malformed or foreign one) gets a new session id and a new token
(`Cluster.session_token`). Every decision is the core's: this module only
moves the token between the cookie, the library and the application.

    cluster = racaffinity.Cluster("nodes = RAC1, RAC2, RAC3\\n"
                                  "node.RAC1.machine = m1\\nnode.RAC2.machine = m2\\n"
                                  "node.RAC3.machine = m3")
    app = WsgiTokenMiddleware(app, cluster)            # or AsgiTokenMiddleware

    def app(environ, start_response):                  # the wrapped application
        route = environ[ROUTE_KEY]                     # a racaffinity.Route
        with pools.node_pool(route.node).connection() as conn: ...

WSGI: `environ[ROUTE_KEY]` is the `Route`, `environ[TOKEN_KEY]` the token the
client holds after this response. ASGI: the same keys in the (copied) `scope`.
The code a request runs also reads that token with `current_token(cluster)`
(a context variable: the WSGI app's call and the iteration of its body, the
ASGI app and the tasks it creates), which is how a global transaction begun
in the request (`racaffinity.tpc`) is placed on the request's node without
being handed the token.
When no node may serve the session now (strict session mode, `session.strict`,
with the session's node down: `StrictAffinityError`; every node down:
`NoNodeAvailableError`), the request still runs, as with Java's
`AffinityFilter`: a page that needs no database (static, health check, logout)
answers. Its route is a `RefusedRoute`, whose `node`, `name` and `kind` raise
that error, so a database borrow (`pools.node_pool(route.node)`) is refused;
the client keeps its token (no `Set-Cookie`) for when the node is back, and
`TOKEN_KEY` and `current_token` carry it (None for a client that had none).
"""

from __future__ import annotations

import contextvars
import re
import secrets
from typing import Any, Awaitable, Callable, Dict, Iterable, Iterator, List, MutableMapping, Optional, Tuple

from ._cluster import Cluster
from ._routes import Route
from ._errors import Error, NoNodeAvailableError, StrictAffinityError
from ._token import REQUEST_TOKEN, RequestToken
from ._token import request_token as current_token

__all__ = [
    "ROUTE_KEY",
    "TOKEN_KEY",
    "DEFAULT_COOKIE",
    "TokenCookie",
    "RefusedRoute",
    "cookie_value",
    "cookie_values",
    "WsgiTokenMiddleware",
    "AsgiTokenMiddleware",
    "current_token",
]

ROUTE_KEY = "racaffinity.route"
"""The environ (WSGI) or scope (ASGI) key of the request's `Route`."""
TOKEN_KEY = "racaffinity.token"
"""The environ or scope key of the session token after this request."""
DEFAULT_COOKIE = "RACAFFINITY_ROUTE"

StartResponse = Callable[..., Any]
WsgiApp = Callable[[Dict[str, Any], StartResponse], Iterable[bytes]]
AsgiReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
AsgiSend = Callable[[MutableMapping[str, Any]], Awaitable[None]]
AsgiApp = Callable[[MutableMapping[str, Any], AsgiReceive, AsgiSend], Awaitable[None]]


_SAME_SITE = {"lax": "Lax", "strict": "Strict", "none": "None"}


def _new_session_id() -> str:
    return secrets.token_hex(16)


# Cookie pairs are separated by ";" (RFC 6265 section 5.4), and by a comma
# that starts a new `name=` pair: where a server joined several Cookie headers
# with "," or ", " (gunicorn; HTTP/2 sends one header per cookie, RFC 9113
# section 8.2.3). A comma followed by anything else stays in its value.
_PAIRS = re.compile(r";|,(?=[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*=)")


def cookie_values(header: Optional[str], name: str) -> List[str]:
    """The non-empty values of every cookie `name` in a `Cookie` request
    header, in the header's order (RFC 6265 section 5.4: longer paths first).
    Several Cookie headers a server joined with commas are read as one
    (a comma starts a new pair only where a `name=` follows it)."""
    values: List[str] = []
    if not header:
        return values
    for part in _PAIRS.split(header):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            if value:
                values.append(value)
    return values


def cookie_value(header: Optional[str], name: str) -> Optional[str]:
    """The value of the first cookie `name` in a `Cookie` request header, or None."""
    values = cookie_values(header, name)
    return values[0] if values else None


class RefusedRoute(Route):
    """The route of a request that no node may serve now: `error` is the
    core's refusal (`StrictAffinityError`: strict session mode and the
    session's node is down; `NoNodeAvailableError`: every node is down).
    Reading `node`, `name` or `kind` raises a copy of it, so the request runs
    and only the database work it asks for is refused."""

    __slots__ = ("error",)

    def __init__(self, error: Error) -> None:  # no Route.__init__: there is no node
        self.error = error

    def _refuse(self) -> Any:
        raise type(self.error)(str(self.error), self.error.code)

    node = property(_refuse, doc="Raises the refusal.")
    kind = property(_refuse, doc="Raises the refusal.")
    name = property(_refuse, doc="Raises the refusal.")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.error).__name__}: {self.error})"


class TokenCookie:
    """The shared part of both middlewares: reads the token, asks the core,
    and says which `Set-Cookie` value (if any) the response must carry.

    `cookie`: the cookie's name; `path`, `secure`, `http_only`, `same_site`:
    its attributes (`path` absolute, without `;`; `secure` None, the default:
    Secure when the request is HTTPS, as Java's `AffinityFilter`, True or
    False: always or never; `same_site` Lax, Strict, None, which needs
    `secure=True`, or None for no attribute; anything else is a
    `ValueError`); `new_session_id`: makes the session id of a new token
    (default 32 random hex digits)."""

    def __init__(
        self,
        cluster: Cluster,
        cookie: str = DEFAULT_COOKIE,
        *,
        path: str = "/",
        secure: Optional[bool] = None,
        http_only: bool = True,
        same_site: Optional[str] = "Lax",
        new_session_id: Callable[[], str] = _new_session_id,
    ) -> None:
        if not cookie or any(c in cookie for c in '=;, \t"'):
            raise ValueError(f"{cookie!r} is not a valid cookie name")
        # RFC 6265 section 4.1.1: a path is an absolute path without `;` or
        # controls; anything else injects an attribute or breaks the header.
        if not path.startswith("/") or any(c == ";" or ord(c) < 0x20 or ord(c) == 0x7F for c in path):
            raise ValueError(f"{path!r} is not a valid cookie path (an absolute path without ';' or controls)")
        site = None
        if same_site:
            site = _SAME_SITE.get(same_site.lower())
            if site is None:
                raise ValueError(
                    f"same_site must be 'Lax', 'Strict', 'None' or None (no SameSite attribute), not {same_site!r}"
                )
            if site == "None" and secure is not True:
                # Browsers drop a SameSite=None cookie without Secure: the
                # client would never keep its token.
                raise ValueError("same_site='None' needs secure=True (browsers drop the cookie otherwise)")
        self.cluster = cluster
        self.cookie = cookie
        self.new_session_id = new_session_id
        self.secure = secure

        def attrs(with_secure: bool) -> str:
            listed = [f"Path={path}"] + ["Secure"] * with_secure + ["HttpOnly"] * http_only
            return "; ".join(listed + ([f"SameSite={site}"] if site else []))

        self._attrs = attrs(False)
        self._attrs_secure = attrs(True)

    def route(
        self, cookie_header: Optional[str], https: bool = False
    ) -> Tuple[Route, Optional[str], Optional[str]]:
        """Routes one request (`https`: whether it came over HTTPS): returns
        its `Route`, the token the client holds after it, and the
        `Set-Cookie` value to send (None: unchanged). When
        no node may serve the session now, the route is a `RefusedRoute`, the
        token the client's (None if it had none) and nothing is sent."""
        token: Optional[str] = None
        try:
            # The core chooses among the cookies of the name (docs/wls-routing.md):
            # a stale one under a longer path must not move the session.
            values = cookie_values(cookie_header, self.cookie)
            chosen = self.cluster.route_tokens(values) if values else None
            if chosen is not None:
                token = chosen.token  # what a refusal keeps for the client
                decided = chosen.route
                if decided.token is None:
                    return decided.route, token, None
                return decided.route, decided.token, self.set_cookie(decided.token, https)
            token = self.cluster.session_token(self.new_session_id())
            decided = self.cluster.route_token(token)
        except (StrictAffinityError, NoNodeAvailableError) as e:
            # As Java's AffinityFilter: the request runs, its database work
            # is refused, and the token is kept for when a node is back.
            return RefusedRoute(e), token, None
        held = decided.token or token
        return decided.route, held, self.set_cookie(held, https)

    def set_cookie(self, token: str, https: bool = False) -> str:
        """The `Set-Cookie` header value that gives the client `token` in the
        response to a request over HTTPS (`https`) or not."""
        secure = https if self.secure is None else self.secure
        return f"{self.cookie}={token}; {self._attrs_secure if secure else self._attrs}"


class WsgiTokenMiddleware:
    """WSGI middleware: routes each request by its token cookie (see the
    module's documentation); `**options` are `TokenCookie`'s."""

    def __init__(self, app: WsgiApp, cluster: Cluster, cookie: str = DEFAULT_COOKIE, **options: Any) -> None:
        self.app = app
        self.tokens = TokenCookie(cluster, cookie, **options)

    def __call__(self, environ: Dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        route, token, set_cookie = self.tokens.route(
            environ.get("HTTP_COOKIE"), environ.get("wsgi.url_scheme") == "https"
        )
        environ[ROUTE_KEY] = route
        environ[TOKEN_KEY] = token
        start = start_response if set_cookie is None else _start_with_cookie(start_response, set_cookie)
        # A context of the request's own: the server's never sees the token,
        # and a body the server iterates later (a generator) still does.
        ctx = contextvars.copy_context()
        ctx.run(REQUEST_TOKEN.set, None if token is None else RequestToken(self.tokens.cluster, token))
        body = ctx.run(self.app, environ, start)
        if isinstance(body, (list, tuple)):
            return body  # runs no code of the app's: as is (servers use its len())
        wrapper = environ.get("wsgi.file_wrapper")
        if isinstance(wrapper, type) and isinstance(body, wrapper):
            # The server's own file wrapper: given back as is, or it would not
            # see it and would lose its sendfile shortcut (a file read runs no
            # code that needs the token).
            return body
        return _BodyInContext(ctx, body)


def _start_with_cookie(start_response: StartResponse, set_cookie: str) -> StartResponse:
    """`start_response` with the token's Set-Cookie before the application's
    headers (Java's AffinityFilter adds its cookie before the servlet runs):
    a cookie of that name the application writes itself (a logout deleting
    it) comes later, and the browser keeps it."""

    def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
        headers = [("Set-Cookie", set_cookie)] + list(headers)
        if exc_info is None:
            return start_response(status, headers)
        return start_response(status, headers, exc_info)

    return start


class _BodyInContext:
    """A WSGI response body iterated (and closed) in the request's context."""

    __slots__ = ("_ctx", "_body", "_it")

    def __init__(self, ctx: contextvars.Context, body: Iterable[bytes]) -> None:
        self._ctx = ctx
        self._body = body
        self._it: Optional[Iterator[bytes]] = None

    def __iter__(self) -> "_BodyInContext":
        return self

    def __next__(self) -> bytes:
        if self._it is None:
            self._it = self._ctx.run(iter, self._body)
        return self._ctx.run(next, self._it)

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            self._ctx.run(close)


class AsgiTokenMiddleware:
    """ASGI middleware: routes each HTTP request by its token cookie (see the
    module's documentation); other scopes (lifespan, websocket) pass through.
    `**options` are `TokenCookie`'s."""

    def __init__(self, app: AsgiApp, cluster: Cluster, cookie: str = DEFAULT_COOKIE, **options: Any) -> None:
        self.app = app
        self.tokens = TokenCookie(cluster, cookie, **options)

    async def __call__(self, scope: MutableMapping[str, Any], receive: AsgiReceive, send: AsgiSend) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        header = "; ".join(
            v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == b"cookie"
        )
        route, token, set_cookie = self.tokens.route(header or None, scope.get("scheme") == "https")
        scope = dict(scope)
        scope[ROUTE_KEY] = route
        scope[TOKEN_KEY] = token
        if set_cookie is not None:
            send = _send_with_cookie(send, set_cookie.encode("latin-1"))
        # The caller's context is this task's: the token is unset again after
        # the request, whatever the server runs next in the task.
        held = REQUEST_TOKEN.set(None if token is None else RequestToken(self.tokens.cluster, token))
        try:
            await self.app(scope, receive, send)
        finally:
            REQUEST_TOKEN.reset(held)


def _send_with_cookie(send: AsgiSend, cookie: bytes) -> AsgiSend:
    async def send_with_cookie(message: MutableMapping[str, Any]) -> None:
        if message.get("type") == "http.response.start":
            message = dict(message)
            message["headers"] = [(b"set-cookie", cookie)] + list(message.get("headers", ()))  # as WSGI's
        await send(message)

    return send_with_cookie
