"""Value types of seed 001's session routing tokens (WebLogic's primary and
backup carried in the session id); the calls are `Cluster.session_routing`,
`Cluster.session_token` and `Cluster.route_token`."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ._cluster import Route

__all__ = ["SessionRouting", "TokenRoute"]


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


# Each NamedTuple's generated __new__ belongs to a made-up module, so its string
# annotations resolve nowhere: the API reference would show
# `ForwardRef('Optional[str]')` (as racaffinity._routes does for Node).
SessionRouting.__new__.__module__ = TokenRoute.__new__.__module__ = __name__
