"""The settings of one pipeline's coordinator (:class:`CoordinatorConfig`) and its ZooKeeper
credentials (:class:`ZkCredentials`). This module does no I/O and does not import kazoo at import time
(the ACL helpers import ``kazoo.security`` when called)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from laminar_kafka.coordinator.vnodes.placement import DEFAULT_STRATEGY, STRATEGIES
from laminar_kafka.coordinator.vnodes.registry import DEFAULT_VNODE_COUNT
from laminar_kafka.errors import ConfigurationError

if TYPE_CHECKING:
    from kazoo.security import ACL

__all__ = ["DEFAULT_SESSION_TIMEOUT_S", "CoordinatorConfig", "ZkCredentials"]

#: the ZooKeeper session timeout of a node and of every coordinator not given one (seconds): a dead
#: node is detected this long after it stopped answering, and its partitions move
DEFAULT_SESSION_TIMEOUT_S = 6.0


@dataclass(frozen=True)
class ZkCredentials:
    """A ZooKeeper digest identity (``user:password``) that owns a pipeline's subtree.

    With credentials, every node the coordinator creates under ``<root>/<pipeline>`` (the subtree
    root included) carries :meth:`acl` (all permissions for this user, nothing for anyone else), and
    every session authenticates with :meth:`kazoo_auth_data`. ``repr`` and ``str`` never show the
    password; neither does any error raised here. The user may not contain ``:``; the password may.
    """

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user or ":" in self.user:
            raise ConfigurationError("ZooKeeper user must be a non-empty string without ':'")
        if not isinstance(self.password, str) or not self.password:
            raise ConfigurationError(f"ZooKeeper password of user {self.user!r} must be a non-empty string")

    @classmethod
    def parse(cls, text: str) -> ZkCredentials:
        """``"user:password"`` (split at the first ``:``); ConfigurationError, without echoing the text,
        when either part is missing."""
        user, colon, password = text.partition(":")
        if not colon or not user or not password:
            raise ConfigurationError("ZooKeeper credentials must be given as user:password")
        return cls(user, password)

    def __repr__(self) -> str:
        return f"ZkCredentials(user={self.user!r}, password='***')"

    def kazoo_auth_data(self) -> list[tuple[str, str]]:
        """The ``auth_data`` argument of ``KazooClient`` (sent again on every reconnection)."""
        return [("digest", f"{self.user}:{self.password}")]

    def acl(self) -> list[ACL]:
        """The ACL of the pipeline's nodes: every permission for this user only."""
        from kazoo.security import make_digest_acl

        return [make_digest_acl(self.user, self.password, all=True)]

    def parent_acl(self) -> list[ACL]:
        """The ACL of the parents above the subtree root that the coordinator creates (e.g. ``/laminar``,
        shared by pipelines that may have other credentials): every permission for this user; anyone
        may list the children and create a sibling subtree, but not change or delete anything."""
        from kazoo.security import make_acl, make_digest_acl

        return [make_digest_acl(self.user, self.password, all=True),
                make_acl("world", "anyone", read=True, create=True)]


@dataclass(frozen=True)
class CoordinatorConfig:
    """Settings of one pipeline's coordinator (identical on every node of the pipeline).

    `hosts` is a kazoo connection string, optionally with a chroot (`h1:2181,h2:2181/chroot`);
    the pipeline lives under `<root>/<pipeline>`. Durations are in seconds. `manifests_to_keep`
    (K >= 1) bounds garbage collection: the last K manifests, epochs and decided rounds are kept.
    ``manifest_deltas`` (ZooKeeper): the leader stores a manifest as the cursors that changed since a
    full one at most K epochs older (:mod:`laminar_kafka.coordinator.manifest_delta`; K more manifests
    are kept); False stores each one full, as a release before format 2 reads them (a rolling upgrade).
    ``quiet_checkpoint_interval`` (0: off): once :data:`~laminar_kafka.coordinator.engine.model.QUIET_AFTER_EPOCHS`
    epochs in a row changed no cursor, the leader opens the next after this many seconds instead of
    ``checkpoint_interval``, unless a node asks for one (it holds rows: ``Coordinator.request_epoch``).
    ``freshness_target`` (0: off): the epoch clock is off; the leader opens an epoch when a node asks
    for one after the latest (nodes ask by need: ``freshness-target-ms``), and none while none asks;
    ``checkpoint_interval`` and ``quiet_checkpoint_interval`` are then not used.
    ``credentials`` (optional): the digest identity that owns the pipeline's subtree (see
    :class:`ZkCredentials`); None keeps ZooKeeper's open ACL. Invalid values raise ConfigurationError
    on construction.
    """

    pipeline: str
    hosts: str = ""
    session_timeout: float = DEFAULT_SESSION_TIMEOUT_S
    checkpoint_interval: float = 1.0
    quiet_checkpoint_interval: float = 0.0
    freshness_target: float = 0.0
    round_deadline: float = 30.0
    vnode_count: int = DEFAULT_VNODE_COUNT
    placement: str = DEFAULT_STRATEGY
    manifests_to_keep: int = 10
    manifest_deltas: bool = True
    root: str = "/laminar"
    credentials: ZkCredentials | None = None

    def __post_init__(self) -> None:
        if not self.pipeline or "/" in self.pipeline or self.pipeline in (".", ".."):
            raise ConfigurationError(f"pipeline name {self.pipeline!r} must be a non-empty path segment")
        if not self.root.startswith("/") or self.root.endswith("/") and self.root != "/":
            raise ConfigurationError(f"root {self.root!r} must be an absolute path without a trailing /")
        for name in ("session_timeout", "checkpoint_interval", "round_deadline"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"{name} = {value!r} must be a positive number of seconds")
        quiet = self.quiet_checkpoint_interval
        if not isinstance(quiet, (int, float)) or isinstance(quiet, bool) or quiet != 0 and quiet < self.checkpoint_interval:
            raise ConfigurationError(
                f"quiet_checkpoint_interval = {quiet!r} must be 0 (off) or at least checkpoint_interval "
                f"({self.checkpoint_interval!r} s)")
        target = self.freshness_target
        if not isinstance(target, (int, float)) or isinstance(target, bool) or target < 0:
            raise ConfigurationError(f"freshness_target = {target!r} must be 0 (off) or a positive number of seconds")
        if not isinstance(self.vnode_count, int) or isinstance(self.vnode_count, bool) or self.vnode_count < 1:
            raise ConfigurationError(f"vnode_count = {self.vnode_count!r} must be an int >= 1")
        if self.placement not in STRATEGIES:
            raise ConfigurationError(f"placement {self.placement!r} is not one of {list(STRATEGIES)}")
        if not isinstance(self.manifests_to_keep, int) or self.manifests_to_keep < 1:
            raise ConfigurationError(f"manifests_to_keep = {self.manifests_to_keep!r} must be an int >= 1")
        if not isinstance(self.manifest_deltas, bool):
            raise ConfigurationError(f"manifest_deltas = {self.manifest_deltas!r} must be a bool")
        if self.credentials is not None and not isinstance(self.credentials, ZkCredentials):
            raise ConfigurationError("credentials must be a ZkCredentials (see ZkCredentials.parse)")

    @property
    def base_path(self) -> str:
        """The pipeline's ZooKeeper subtree."""
        return f"{self.root.rstrip('/')}/{self.pipeline}"
