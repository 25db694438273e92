"""The settings of one pipeline's coordinator (:class:`CoordinatorConfig`). This module does no I/O."""
from __future__ import annotations

from dataclasses import dataclass

from coordinator.errors import ConfigurationError
from coordinator.placement import DEFAULT_STRATEGY, STRATEGIES
from coordinator.registry import DEFAULT_VNODE_COUNT

__all__ = ["CoordinatorConfig"]


@dataclass(frozen=True)
class CoordinatorConfig:
    """Settings of one pipeline's coordinator (identical on every node of the pipeline).

    `hosts` is a kazoo connection string, optionally with a chroot (`h1:2181,h2:2181/chroot`);
    the pipeline lives under `<root>/<pipeline>`. Durations are in seconds. `manifests_to_keep`
    (K >= 1) bounds garbage collection: the last K manifests, epochs and decided rounds are kept.
    Invalid values raise ConfigurationError on construction.
    """

    pipeline: str
    hosts: str = ""
    session_timeout: float = 10.0
    checkpoint_interval: float = 1.0
    round_deadline: float = 30.0
    vnode_count: int = DEFAULT_VNODE_COUNT
    placement: str = DEFAULT_STRATEGY
    manifests_to_keep: int = 10
    root: str = "/laminar"

    def __post_init__(self) -> None:
        if not self.pipeline or "/" in self.pipeline or self.pipeline in (".", ".."):
            raise ConfigurationError(f"pipeline name {self.pipeline!r} must be a non-empty path segment")
        if not self.root.startswith("/") or self.root.endswith("/") and self.root != "/":
            raise ConfigurationError(f"root {self.root!r} must be an absolute path without a trailing /")
        for name in ("session_timeout", "checkpoint_interval", "round_deadline"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f"{name} = {value!r} must be a positive number of seconds")
        if not isinstance(self.vnode_count, int) or isinstance(self.vnode_count, bool) or self.vnode_count < 1:
            raise ConfigurationError(f"vnode_count = {self.vnode_count!r} must be an int >= 1")
        if self.placement not in STRATEGIES:
            raise ConfigurationError(f"placement {self.placement!r} is not one of {list(STRATEGIES)}")
        if not isinstance(self.manifests_to_keep, int) or self.manifests_to_keep < 1:
            raise ConfigurationError(f"manifests_to_keep = {self.manifests_to_keep!r} must be an int >= 1")

    @property
    def base_path(self) -> str:
        """The pipeline's ZooKeeper subtree."""
        return f"{self.root.rstrip('/')}/{self.pipeline}"
