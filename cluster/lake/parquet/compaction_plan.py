"""What a compaction of the Parquet tree rewrites, and what a leftover of one is. Pure, no I/O.

The I/O is :mod:`laminar_kafka.cluster.lake.parquet.compaction`; this module decides, from names,
sizes and schema keys handed to it:

- **Eligible files** (:func:`plan_directory`): in one leaf directory, a published file is rewritten
  only when its name says which epochs it holds (``epoch-<E>.node-...parquet`` from the sink,
  ``epochs-<A>-<B>.compact-<id>-<k>.parquet`` from an earlier compaction), every one of those epochs
  is older than the oldest epoch record the tree keeps (``_laminar/epochs/``: a node reconciling at
  start checks that every file a kept record lists exists, so such a file must never move), no kept
  record lists it, and it is smaller than the target. Any other name (a file put there by hand) is
  left alone.
- **Bins**: the eligible files of one schema (identical Arrow schema, metadata included: nothing is
  unified), in epoch order, packed one after the other into bins of at most the target size; a bin
  of fewer than ``min_input_files`` files is dropped (rewriting one file gains nothing). Each bin
  becomes one output file named by the compaction's id and the epochs it holds, so an output can be
  an input of a later compaction.
- **The exchange** (:func:`links_for_exchange`, :func:`strays_after_exchange`): which entries of the
  live directory are hard-linked into the new one, and when the live directory cannot be exchanged.
- **Leftovers** (:func:`classify_leftover`, :func:`plan_cleanup`): a work directory
  ``_laminar/compact/<id>`` a pass did not delete (killed, or within its grace period). It holds
  outputs of ``<id>`` when the exchange did not happen (the live directory still holds the inputs)
  and the replaced directory when it did (the live directory holds the outputs); either way no reader
  lists it. A replaced directory is deleted once ``grace`` seconds old (a reader that opened it before
  the exchange may still read it), the others at once.
"""
from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from laminar_kafka.cluster.errors import UsageError

__all__ = [
    "DEFAULT_GRACE_S", "DEFAULT_TARGET_FILE_BYTES", "MAX_TARGET_FILE_BYTES", "MIN_TARGET_FILE_BYTES",
    "Bin", "Cleanup", "Codec", "CompactionSettings", "DataFile", "DirectoryPlan", "Entry", "FileEpochs",
    "LeftoverKind", "WorkDirectory", "classify_leftover", "epochs_of", "is_candidate", "is_compact_id",
    "links_for_exchange",
    "output_name", "plan_cleanup", "plan_directory", "strays_after_exchange",
]

MIN_TARGET_FILE_BYTES = 1024 * 1024
MAX_TARGET_FILE_BYTES = 64 * 1024 ** 3
DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
#: how long a replaced directory is kept for readers that hold it open (seconds)
DEFAULT_GRACE_S = 60.0

_PUBLISHED_RE = re.compile(r"epoch-(?P<epoch>\d{10,19})\.node-\d+\.boot-[A-Za-z0-9-]+\.seq-\d{8}\.parquet")
_COMPACTED_RE = re.compile(
    r"epochs-(?P<first>\d{10,19})-(?P<last>\d{10,19})\.compact-(?P<id>[0-9a-f]{16})-(?P<part>\d+)\.parquet")
_ID_RE = re.compile(r"[0-9a-f]{16}")


class Codec(enum.Enum):
    """The compression of a rewritten file. ``zstd`` by default: compacted files are read for a long
    time and written once, and every current reader (Arrow, DuckDB, Spark, Trino, Iceberg) reads it."""

    ZSTD = "zstd"
    SNAPPY = "snappy"
    GZIP = "gzip"
    LZ4 = "lz4"
    NONE = "none"

    @classmethod
    def parse(cls, text: str) -> Codec:
        """The codec named ``text`` (case-insensitive); :class:`UsageError` naming the choices."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise UsageError(f"codec {text!r}: expected one of {', '.join(c.value for c in cls)}") from None

    @property
    def parquet(self) -> str:
        """The ``compression`` argument of pyarrow's Parquet writer (``lz4`` writes LZ4_RAW)."""
        return self.value


@dataclass(frozen=True)
class CompactionSettings:
    """What a pass aims at. Raises :class:`UsageError` (naming the flag) for a value out of range."""

    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    codec: Codec = Codec.ZSTD
    grace_s: float = DEFAULT_GRACE_S
    min_input_files: int = 2

    def __post_init__(self) -> None:
        if not MIN_TARGET_FILE_BYTES <= self.target_file_bytes <= MAX_TARGET_FILE_BYTES:
            raise UsageError(f"--target-file-bytes must be between {MIN_TARGET_FILE_BYTES} (1 MiB) and "
                             f"{MAX_TARGET_FILE_BYTES} (64 GiB), got {self.target_file_bytes}")
        if not self.grace_s >= 0:  # also refuses NaN
            raise UsageError(f"--grace must be >= 0 seconds, got {self.grace_s:g}")
        if self.min_input_files < 2:
            raise UsageError(f"min_input_files must be >= 2, got {self.min_input_files}")


@dataclass(frozen=True)
class FileEpochs:
    """The epochs a data file holds (``first`` .. ``last``) and, for a compaction's output, its id."""

    first: int
    last: int
    compact_id: str | None = None


def epochs_of(name: str) -> FileEpochs | None:
    """The epochs of a published file name (the sink's or a compaction's); None for any other name."""
    match = _PUBLISHED_RE.fullmatch(name)
    if match is not None:
        epoch = int(match["epoch"])
        return FileEpochs(epoch, epoch) if epoch > 0 else None
    match = _COMPACTED_RE.fullmatch(name)
    if match is not None:
        first, last = int(match["first"]), int(match["last"])
        return FileEpochs(first, last, match["id"]) if 0 < first <= last else None
    return None


def is_compact_id(text: str) -> bool:
    """Whether ``text`` is a compaction id (16 lowercase hex digits), as the work directories are named."""
    return _ID_RE.fullmatch(text) is not None


def output_name(first: int, last: int, compact_id: str, part: int) -> str:
    """The name of output ``part`` of compaction ``compact_id``, holding epochs ``first`` .. ``last``.
    Never a name the sink writes, and unique per id and part, so it never names an input."""
    if not is_compact_id(compact_id) or not 0 < first <= last or part < 0:
        raise ValueError(f"bad output name parts {(first, last, compact_id, part)!r}")
    return f"epochs-{first:010d}-{last:010d}.compact-{compact_id}-{part}.parquet"


@dataclass(frozen=True)
class DataFile:
    """A published file of a leaf directory: its name, size in bytes, and a key equal for two files
    exactly when their Arrow schemas are identical (None: not read, the file is not a candidate)."""

    name: str
    size: int
    schema: str | None = None


@dataclass(frozen=True)
class Bin:
    """Input files rewritten into one output file."""

    inputs: tuple[str, ...]
    output: str
    input_bytes: int


@dataclass(frozen=True)
class DirectoryPlan:
    """What a pass does in one leaf directory (``directory``: relative to the root): ``files`` is
    how many published files it holds, ``compact_id`` names the work directory and the outputs."""

    directory: str
    files: int
    compact_id: str
    bins: tuple[Bin, ...] = ()

    @property
    def inputs(self) -> frozenset[str]:
        return frozenset(name for b in self.bins for name in b.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(b.output for b in self.bins)

    @property
    def last_epoch(self) -> int:
        """The newest epoch an input holds (0: no bin)."""
        return max((last for last in (_last(name) for name in self.outputs)), default=0)

    @property
    def files_after(self) -> int:
        return self.files - len(self.inputs) + len(self.bins)

    @property
    def input_bytes(self) -> int:
        return sum(b.input_bytes for b in self.bins)


def _last(output: str) -> int:
    epochs = epochs_of(output)
    assert epochs is not None
    return epochs.last


def is_candidate(name: str, size: int, directory: str, *, oldest_record_epoch: int | None,
                 protected: frozenset[str], target_file_bytes: int) -> bool:
    """Whether a file may be rewritten, before its schema is known (see the module docstring).
    ``oldest_record_epoch`` None: the tree keeps no record, so no epoch is known to be settled."""
    epochs = epochs_of(name)
    if epochs is None or oldest_record_epoch is None or epochs.last >= oldest_record_epoch:
        return False
    return size < target_file_bytes and _join(directory, name) not in protected


def plan_directory(
    directory: str,
    files: Sequence[DataFile],
    *,
    oldest_record_epoch: int | None,
    protected: frozenset[str],
    settings: CompactionSettings,
    compact_id: str,
) -> DirectoryPlan:
    """The bins of one leaf directory ``directory`` (relative to the root) holding ``files``.

    ``protected``: the files every kept record lists (relative to the root). Post: every input is a
    candidate (:func:`is_candidate`) with a schema key; the bins are disjoint; a bin holds files of one
    schema key, at least ``settings.min_input_files`` of them, at most ``settings.target_file_bytes``
    bytes in all; its output holds epochs from its inputs' first to their last, named by
    ``compact_id``, distinct from every name in ``files``."""
    if not is_compact_id(compact_id):
        raise ValueError(f"bad compaction id {compact_id!r}")
    groups: dict[str, list[tuple[FileEpochs, DataFile]]] = {}
    for file in files:
        if file.schema is None or not is_candidate(file.name, file.size, directory,
                                                   oldest_record_epoch=oldest_record_epoch, protected=protected,
                                                   target_file_bytes=settings.target_file_bytes):
            continue
        epochs = epochs_of(file.name)
        assert epochs is not None
        groups.setdefault(file.schema, []).append((epochs, file))
    existing = {file.name for file in files}
    bins: list[Bin] = []
    for key in sorted(groups):
        ordered = sorted(groups[key], key=lambda item: (item[0].first, item[0].last, item[1].name))
        for packed in _pack(ordered, settings.target_file_bytes):
            if len(packed) < settings.min_input_files:
                continue
            name = output_name(min(e.first for e, _ in packed), max(e.last for e, _ in packed), compact_id, len(bins))
            if name in existing:  # an id used twice: never overwrite, never list a name twice
                raise ValueError(f"output {name} already exists in {directory!r}")
            bins.append(Bin(tuple(f.name for _, f in packed), name, sum(f.size for _, f in packed)))
    return DirectoryPlan(directory, len(files), compact_id, tuple(bins))


def _pack(ordered: Sequence[tuple[FileEpochs, DataFile]], target: int) -> list[list[tuple[FileEpochs, DataFile]]]:
    """Consecutive runs of ``ordered`` of at most ``target`` bytes each (every file is below it)."""
    packed: list[list[tuple[FileEpochs, DataFile]]] = []
    current: list[tuple[FileEpochs, DataFile]] = []
    total = 0
    for item in ordered:
        if current and total + item[1].size > target:
            packed.append(current)
            current, total = [], 0
        current.append(item)
        total += item[1].size
    if current:
        packed.append(current)
    return packed


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


# ---- the exchange ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """An entry of a directory listing: its name, and whether it is a directory (not following links)."""

    name: str
    is_dir: bool = False


def links_for_exchange(live: Iterable[Entry], plan: DirectoryPlan) -> tuple[tuple[str, ...], str]:
    """Under the exclusive publish lock, from the live directory's listing: the names to hard-link
    into the new directory (every entry that is not an input), and ``""``, or ``()`` and why the
    directory cannot be exchanged now (a subdirectory, which cannot be hard-linked and would leave
    the live tree with the old directory; an input gone, such as deleted by hand; an output's name
    taken)."""
    entries = list(live)
    subdirectories = sorted(e.name for e in entries if e.is_dir)
    if subdirectories:
        return (), f"it holds subdirectories ({', '.join(subdirectories[:3])}): only leaf directories are compacted"
    names = {e.name for e in entries}
    gone = sorted(plan.inputs - names)
    if gone:
        return (), f"input {gone[0]} is gone{f' (and {len(gone) - 1} more)' if len(gone) > 1 else ''}"
    taken = sorted(names.intersection(plan.outputs))
    if taken:
        return (), f"output name {taken[0]} is taken"
    return tuple(sorted(names - plan.inputs)), ""


def strays_after_exchange(replaced: Iterable[str], plan: DirectoryPlan, linked: Iterable[str]) -> tuple[str, ...]:
    """Names in the replaced directory that are neither inputs nor linked into the live one: a file
    renamed in by a writer that did not take the publish lock. Its rows are in no live file, so it
    must move into the live directory."""
    known = plan.inputs | set(linked)
    return tuple(sorted(name for name in replaced if name not in known))


# ---- leftovers -------------------------------------------------------------------------------------------


class LeftoverKind(enum.Enum):
    """What a work directory ``_laminar/compact/<id>`` holds after its pass ended or died."""

    #: outputs of ``<id>`` (and maybe hard links): the exchange did not happen, the inputs are live
    UNSWAPPED = "not exchanged"
    #: the directory the exchange replaced: its inputs, and the original names of the linked files
    SWAPPED = "replaced directory"
    #: nothing (killed before writing)
    EMPTY = "empty"


def classify_leftover(compact_id: str, names: Iterable[str]) -> LeftoverKind:
    """The kind of the work directory of ``compact_id`` holding ``names``. The exchange is atomic,
    so its outputs are in exactly one of the work directory and the live one."""
    listed = list(names)
    if not listed:
        return LeftoverKind.EMPTY
    for name in listed:
        epochs = epochs_of(name)
        if epochs is not None and epochs.compact_id == compact_id:
            return LeftoverKind.UNSWAPPED
    return LeftoverKind.SWAPPED


@dataclass(frozen=True)
class WorkDirectory:
    """A work directory found under ``_laminar/compact/``: its name, its entries' names, its age
    (seconds since it was last changed; the exchange touches it)."""

    name: str
    names: tuple[str, ...]
    age_s: float


@dataclass(frozen=True)
class Cleanup:
    """A leftover work directory, what it holds, and whether to delete it now."""

    name: str
    kind: LeftoverKind
    delete: bool


def plan_cleanup(found: Iterable[WorkDirectory], grace_s: float) -> tuple[Cleanup, ...]:
    """The leftovers among ``found`` (a name that is not a compaction id is not ours: ignored). A
    replaced directory is deleted once ``grace_s`` old (a reader may hold it open); the others at
    once (no reader ever listed them). Only called under the compaction lock, so no pass is
    writing one of them."""
    result = []
    for work in sorted(found, key=lambda w: w.name):
        if not is_compact_id(work.name):
            continue
        kind = classify_leftover(work.name, work.names)
        result.append(Cleanup(work.name, kind, kind is not LeftoverKind.SWAPPED or work.age_s >= grace_s))
    return tuple(result)
