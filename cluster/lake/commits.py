"""Who commits an epoch into the lake's tables, and what a lake reports about its table commits.

Several nodes publish every committed epoch (:mod:`laminar_kafka.cluster.lake.outputs`); for a
format with tables (Iceberg) exactly one of them lands each table's commit, and the others either
lose a race to it (the catalog refuses their commit; they reload the table and find the epoch there)
or find the epoch already committed when they come to it. A :class:`CommitListener` hears each of
those outcomes as it happens, on the publishing thread; the runtime's listener counts them
(``laminar_lake_commit_seconds``, ``laminar_lake_commit_conflicts``, ``laminar_lake_commits_found_done``).

Taking turns (:func:`committer_of`): were every node to commit every epoch as soon as it is
committed, all of them would race to the catalog at once, and all but one lose: with three nodes,
two refused commits per epoch (measured), each a catalog round trip and a manifest and manifest
list left behind in the object store (pyiceberg does not delete what a refused commit wrote). So an
epoch's tables are committed by one of the nodes that acked it, in turn; every other node commits,
at the same time, only up to the epoch before, which its committer has normally done already (one
table load finds it there). An epoch whose committer died or stopped before committing is thus
committed one epoch later by the others, and every start, join and tenth epoch publishes
everything pending whoever's turn it was: a turn decides who is first, never whether an epoch lands.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

__all__ = ["CommitListener", "IgnoreCommits", "committer_of"]


def committer_of(epoch: int, acked_by: Iterable[int]) -> int | None:
    """The node whose turn it is to commit ``epoch``'s tables first: the nodes that acked the epoch
    (``acked_by``, ids), in id order, take turns by epoch number. None when no node acked it (the
    pinned start, epoch 0): then every node commits. Pure."""
    nodes = sorted(set(acked_by))
    return nodes[epoch % len(nodes)] if nodes else None


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
