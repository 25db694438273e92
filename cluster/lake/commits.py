"""What a lake reports about its table commits, for the node's metrics.

Several nodes publish every committed epoch (:mod:`laminar_kafka.cluster.lake.outputs`); for a
format with tables (Iceberg) exactly one of them lands each table's commit, and the others either
lose a race to it (the catalog refuses their commit; they reload the table and find the epoch there)
or find the epoch already committed when they come to it. A :class:`CommitListener` hears each of
those outcomes as it happens, on the publishing thread; the runtime's listener counts them
(``laminar_lake_commit_seconds``, ``laminar_lake_commit_conflicts``, ``laminar_lake_commits_found_done``).
"""
from __future__ import annotations

from typing import Protocol

__all__ = ["CommitListener", "IgnoreCommits"]


class CommitListener(Protocol):
    """Hears a lake's table commits. Called on the publishing thread; must not block or raise."""

    def committed(self, table: str, seconds: float) -> None:
        """This node committed one epoch into ``table``; the catalog transaction took ``seconds``."""

    def lost_race(self, table: str) -> None:
        """A commit into ``table`` lost to a concurrent committer and is retried from a reload."""

    def found_done(self, table: str) -> None:
        """This node came to commit ``table`` and found the epoch already committed (a no-op)."""


class IgnoreCommits:
    """The listener of a lake nobody observes (the default, and tools such as ``verify``)."""

    def committed(self, table: str, seconds: float) -> None:
        pass

    def lost_race(self, table: str) -> None:
        pass

    def found_done(self, table: str) -> None:
        pass
