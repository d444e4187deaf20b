"""Value types of seed 001's session routing tokens (WebLogic's primary and
backup carried in the session id); the calls are `Cluster.session_routing`,
`Cluster.session_token` and `Cluster.route_token`. Also the token of the
request being handled, which `racaffinity.web`'s middleware sets and
two-phase commit reads: a leaf module, so that neither imports the other."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, NamedTuple, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ._cluster import Cluster
    from ._routes import Route

__all__ = ["SessionRouting", "TokenRoute", "TokenChoice", "RequestToken", "REQUEST_TOKEN", "request_token"]


class SessionRouting(NamedTuple):
    """A session's routing data: the `primary` node (id and name) and the
    `backup` that takes over when it is gone (on another machine whenever the
    topology has one; None when no other node is usable)."""

    primary: int
    primary_name: str
    backup: Optional[int]
    backup_name: Optional[str]


class TokenRoute(NamedTuple):
    """What `Cluster.route_token` decided: the `route` for this request and
    the rewritten `token` when the routing data changed (None when the
    client's token still holds)."""

    route: "Route"
    token: Optional[str]

    @property
    def changed(self) -> bool:
        """Whether the client must be sent the rewritten token."""
        return self.token is not None


class TokenChoice:
    """Which of a request's tokens `Cluster.route_tokens` chose (`index`, in
    the order given; `token`, as sent) and how it routed. The choice stands
    when no node may serve the session now (strict session mode, every node
    down): the client keeps `token`, `refusal` holds the core's error, and
    `route` raises it."""

    __slots__ = ("index", "token", "_route", "refusal")

    def __init__(self, index: int, token: str, route: Optional[TokenRoute], refusal: Optional[Exception]) -> None:
        self.index = index
        self.token = token
        self._route = route
        self.refusal = refusal

    @property
    def route(self) -> TokenRoute:
        """The chosen token's `TokenRoute`, as `Cluster.route_token` decides
        it; raises `StrictAffinityError` or `NoNodeAvailableError` (the
        `refusal`) when no node may serve the session now."""
        if self._route is None:
            assert self.refusal is not None
            raise self.refusal
        return self._route

    def __repr__(self) -> str:
        decided = f"refusal={self.refusal!r}" if self._route is None else f"route={self._route!r}"
        return f"TokenChoice(index={self.index}, token={self.token!r}, {decided})"


# Each NamedTuple's generated __new__ belongs to a made-up module, so its string
# annotations resolve nowhere: the API reference would show
# `ForwardRef('Optional[str]')` (as racaffinity._routes does for Node).
SessionRouting.__new__.__module__ = TokenRoute.__new__.__module__ = __name__


class RequestToken(NamedTuple):
    """The token a middleware of `cluster` decided for the request being
    handled: the one the client holds after it (`racaffinity.web.TOKEN_KEY`)."""

    cluster: "Cluster"
    token: str


RequestToken.__new__.__module__ = __name__  # as for the tuples above


REQUEST_TOKEN: contextvars.ContextVar[Optional[RequestToken]] = contextvars.ContextVar(
    "racaffinity_request_token", default=None
)
"""Set by `WsgiTokenMiddleware`/`AsgiTokenMiddleware` for the code a request runs."""


def request_token(cluster: "Optional[Cluster]" = None) -> Optional[str]:
    """The session routing token of the request being handled, as a token
    middleware of `cluster` decided it (of any cluster when None); None
    outside such a request. A token belongs to its cluster's nodes: another
    cluster's request token is no input of this one's routing."""
    held = REQUEST_TOKEN.get()
    if held is None or (cluster is not None and held.cluster is not cluster):
        return None
    return held.token
