"""The coordinator package's exception hierarchy.

Every exception raised on purpose by :mod:`coordinator` derives from :class:`CoordinatorError`, so
callers can catch the whole package with one clause, except a bad setting or argument: that is the
distribution's one :class:`~laminar_kafka.errors.ConfigurationError` (re-exported here), not a
CoordinatorError; :class:`AccessDeniedError` is both. When an error wraps a lower-level failure (a kazoo
exception, an ``OSError``), the original is kept as ``.cause`` and also chained as ``__cause__``.
"""
from __future__ import annotations

from laminar_kafka.errors import ConfigurationError, LaminarError

__all__ = [
    "CoordinatorError",
    "RegistryError",
    "RoutingError",
    "PlacementError",
    "RoundError",
    "FencedError",
    "SessionLostError",
    "ConfigurationError",
    "AccessDeniedError",
    "CodecError",
    "CoordinatorUnavailable",
    "ControlStateLost",
    "NodeIdTaken",
]


class CoordinatorError(LaminarError):
    """Root of every error the coordinator package raises (a :class:`~laminar_kafka.errors.LaminarError`).

    ``cause`` is the underlying exception, if any (``None`` otherwise); it is also chained as
    ``__cause__`` when nothing else is.
    """

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message, cause=cause)
        if cause is not None and self.__cause__ is None:
            self.__cause__ = cause


class RegistryError(CoordinatorError):
    """A snapshot or publication is malformed: wrong vnode count, negative owner, non-increasing version."""


class RoutingError(CoordinatorError):
    """Invalid routing input: partition outside ``0..2**31-1``, vnode count below one, bad identity."""


class PlacementError(CoordinatorError):
    """Placement cannot run: unknown strategy, invalid node id, or load map outside the vnode range."""


class RoundError(CoordinatorError):
    """A round identity is non-canonical, stale (its predecessor is not the published version),
    superseded by another round, or fails to decode."""


class FencedError(CoordinatorError):
    """A fenced write was rejected: the writer is no longer the leader, or the expected version moved."""


class SessionLostError(CoordinatorError):
    """The coordination session was lost; the node must retire its work and rejoin with a new boot id."""


class ControlStateLost(CoordinatorError):
    """The pipeline's control state is gone or went back under a running node (its ZooKeeper subtree
    deleted, the ensemble replaced or restored from an older copy): nothing the node holds is valid
    any more. The node stops; started again, it reconciles with the lake."""


class NodeIdTaken(CoordinatorError):
    """A node id is held by a live member that is not this node: another process joined as that id
    (refused after waiting out a previous run's session), or, with ``node-id auto``, another identity's
    node runs as the id a host name's ordinal gives (refused at once)."""


class CoordinatorUnavailable(CoordinatorError):
    """The coordination service could not answer now (connection loss, an expired session): nothing
    is known about what was asked; ask again later (unlike an absent record, which is an answer)."""


class AccessDeniedError(CoordinatorError, ConfigurationError):
    """ZooKeeper denied this session access to the pipeline's subtree (its digest ACL names other
    credentials): the credentials are missing or wrong. The message names the path, never a secret."""


class CodecError(CoordinatorError):
    """A durable record does not decode: not strict JSON, a wrong type (a bool or a string where an
    integer belongs), a negative or out-of-range number, a missing or unknown key, an unknown format
    version, or a truncated or mismatching chunk set. The message names the record and the field."""
