"""The continuous audit's arithmetic: what one pass adds to a partition's account. Pure, no I/O.

A partition's account is audited up to a *mark*: the next offset of the lake's latest epoch when the
last pass ran (every row below it has been compared with Kafka). A pass brings the rows of the files
the lake gained since (:class:`PartitionPass`: their offsets, the new mark, and the offsets Kafka
holds in ``[old mark, new mark)``), and :func:`advance` settles them:

- rows in the window ``[old mark, new mark)`` are compared with Kafka's offsets there: an offset Kafka
  holds and no row carries is *missing*; a row carried twice is *duplicated*; a row Kafka does not
  hold (and that is not below its low watermark, deleted by retention) is *unexpected*;
- a row below the old mark *recovers* its offset if an earlier pass found it missing (a lost epoch
  landed again), and is *duplicated* otherwise (that offset was settled: a copied file);
- a row at or past the new mark (a file published before its epoch's record) waits in ``pending``
  for the pass whose mark passes it.

The duplicated and unexpected totals only grow; the missing offsets are kept (a set, as large as the
damage) so that rows landing later settle them. The watcher starts a fresh account (a full audit)
when the lake lost or rewrote files, which no increment can account for.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

__all__ = ["PartitionAccount", "PartitionPass", "PassResult", "advance"]

_EMPTY = np.empty(0, np.int64)


@dataclass(frozen=True)
class PartitionAccount:
    """One partition, audited up to ``mark``: the offsets found missing, totals so far, and the rows
    seen at or past the mark."""

    mark: int = 0
    missing_offsets: np.ndarray = field(default_factory=lambda: _EMPTY, compare=False)
    duplicated: int = 0
    unexpected: int = 0
    present: int = 0
    pending: np.ndarray = field(default_factory=lambda: _EMPTY, compare=False)

    @property
    def missing(self) -> int:
        return int(self.missing_offsets.size)

    @property
    def first_missing(self) -> tuple[int, ...]:
        """The first few offsets missing (for the log line)."""
        return tuple(int(o) for o in self.missing_offsets[:5])


@dataclass(frozen=True)
class PartitionPass:
    """What a pass read for one partition: the offsets of its new rows (any order), the new mark
    (the lake's next offset now; never below the account's), Kafka's offsets in ``[account mark,
    new mark)``, and the partition's low watermark (rows below it were deleted by retention)."""

    rows: np.ndarray
    mark: int
    expected: np.ndarray
    low_watermark: int = 0


@dataclass(frozen=True)
class PassResult:
    """What one pass found in one partition (not totals): ``recovered`` offsets were missing before."""

    missing: int
    duplicated: int
    unexpected: int
    present: int
    recovered: int = 0


def advance(account: PartitionAccount, seen: PartitionPass) -> tuple[PartitionAccount, PassResult]:
    """Settle ``seen`` against ``account``: the new account and what this pass found."""
    if seen.mark < account.mark:
        raise ValueError(f"the mark moved back from {account.mark} to {seen.mark}")
    rows = np.concatenate([account.pending, np.asarray(seen.rows, np.int64)])
    below, below_counts = np.unique(rows[rows < account.mark], return_counts=True)
    recovered = np.intersect1d(below, account.missing_offsets, assume_unique=True)
    window = rows[(rows >= account.mark) & (rows < seen.mark)]
    unique, counts = np.unique(window, return_counts=True)
    expected = np.unique(np.asarray(seen.expected, np.int64))
    missing = np.setdiff1d(expected, unique, assume_unique=True)
    unexpected = np.setdiff1d(unique, expected, assume_unique=True)
    unexpected = unexpected[unexpected >= seen.low_watermark]
    present = int(np.intersect1d(expected, unique, assume_unique=True).size)
    duplicated = int(np.sum(below_counts)) - int(recovered.size) + int(np.sum(counts - 1))
    found = PassResult(int(missing.size), duplicated, int(unexpected.size), present, int(recovered.size))
    return replace(
        account,
        mark=seen.mark,
        missing_offsets=np.union1d(np.setdiff1d(account.missing_offsets, recovered, assume_unique=True), missing),
        duplicated=account.duplicated + found.duplicated,
        unexpected=account.unexpected + found.unexpected,
        present=account.present + found.present + found.recovered,
        pending=rows[rows >= seen.mark],
    ), found
