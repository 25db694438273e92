"""What a compaction pass of the Parquet tree did, as text lines or JSON. Values only, no I/O."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DirectoryReport", "TreeReport"]


@dataclass(frozen=True)
class DirectoryReport:
    """One leaf directory a pass planned to rewrite (``directory``: relative to the root).
    ``skipped``: why nothing was exchanged (files before and after are then equal)."""

    directory: str
    files_before: int
    files_after: int
    bytes_rewritten: int
    outputs: tuple[str, ...] = ()
    skipped: str = ""

    def line(self) -> str:
        if self.skipped:
            return f"{self.directory}: skipped, {self.skipped}"
        return (f"{self.directory}: {self.files_before} -> {self.files_after} files, "
                f"{self.bytes_rewritten:,} bytes rewritten")


@dataclass(frozen=True)
class TreeReport:
    """A pass over ``topics``: the directories it rewrote or skipped, how many leaf directories it
    saw, and the leftovers it deleted or kept (replaced directories still in their grace period).
    The file and byte counts are over the directories rewritten."""

    topics: tuple[str, ...]
    directories: tuple[DirectoryReport, ...] = ()
    leaf_directories: int = 0
    leftovers_deleted: int = 0
    leftovers_kept: int = 0
    oldest_record_epoch: int | None = None

    @property
    def rewritten(self) -> tuple[DirectoryReport, ...]:
        """The directories exchanged (not skipped)."""
        return tuple(d for d in self.directories if not d.skipped)

    @property
    def files_before(self) -> int:
        return sum(d.files_before for d in self.rewritten)

    @property
    def files_after(self) -> int:
        return sum(d.files_after for d in self.rewritten)

    @property
    def bytes_rewritten(self) -> int:
        return sum(d.bytes_rewritten for d in self.rewritten)

    def to_json(self) -> dict[str, object]:
        return {
            "format": "parquet", "topics": list(self.topics), "leaf_directories": self.leaf_directories,
            "oldest_record_epoch": self.oldest_record_epoch,
            "files_before": self.files_before, "files_after": self.files_after, "bytes_rewritten": self.bytes_rewritten,
            "directories": [{"directory": d.directory, "files_before": d.files_before, "files_after": d.files_after,
                             "bytes_rewritten": d.bytes_rewritten, "outputs": list(d.outputs), "skipped": d.skipped}
                            for d in self.directories],
            "leftovers_deleted": self.leftovers_deleted, "leftovers_kept": self.leftovers_kept,
        }

    def lines(self) -> list[str]:
        """Text: a line per directory rewritten or skipped, then the summary."""
        leaves = f"{self.leaf_directories} leaf director{'y' if self.leaf_directories == 1 else 'ies'}"
        summary = (f"{', '.join(self.topics)}: {leaves}, "
                   f"{len(self.rewritten)} rewritten: {self.files_before} -> "
                   f"{self.files_after} files, {self.bytes_rewritten:,} bytes rewritten; leftovers "
                   f"{self.leftovers_deleted} deleted, {self.leftovers_kept} kept for --grace")
        if self.oldest_record_epoch is None:
            summary += "; no epoch record in the tree: no epoch is known settled, nothing is rewritten"
        return [d.line() for d in self.directories] + [summary]
