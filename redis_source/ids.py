"""Redis stream entry IDs as integer offsets (pure, no I/O).

A Redis stream entry ID is ``<milliseconds>-<sequence>``, increasing in append order but not dense.
The source protocol's cursors are integers, so an ID is packed as ``ms << SEQUENCE_BITS | seq``: the
order of offsets is the order of IDs, every offset fits a signed 64-bit integer (milliseconds
below 2**43, the year 2248), and any integer is a valid *position* (the first entry at or above
it). A cursor is the position of the next entry to read; after an entry it is that entry's offset
plus one.

Auto-generated IDs (``XADD key * ...``) number entries of the same millisecond from 0, so a
sequence number at or above 2**20 (a million entries in one millisecond of one stream) never
happens; an explicit ID with one raises :class:`StreamIdError` rather than being misplaced.
"""
from __future__ import annotations

from laminar_kafka.redis_source.errors import StreamIdError

__all__ = [
    "MAX_MILLISECONDS", "MAX_SEQUENCE", "SEQUENCE_BITS", "entry_id_of", "offset_of", "position_after", "read_from",
]

SEQUENCE_BITS = 20
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_MILLISECONDS = (1 << (63 - SEQUENCE_BITS)) - 1


def offset_of(entry_id: str | bytes) -> int:
    """The offset of the entry ``entry_id`` (``"ms-seq"``); StreamIdError when it cannot be one."""
    text = entry_id.decode("ascii", "replace") if isinstance(entry_id, bytes) else entry_id
    ms_text, dash, seq_text = text.partition("-")
    if not dash or not ms_text.isdigit() or not seq_text.isdigit():
        raise StreamIdError(f"stream entry ID {text!r} is not <milliseconds>-<sequence>")
    ms, seq = int(ms_text), int(seq_text)
    if seq > MAX_SEQUENCE:
        raise StreamIdError(f"stream entry ID {text!r}: sequence {seq} is past {MAX_SEQUENCE} (an explicit ID; "
                            f"auto-generated IDs never reach it)")
    if ms > MAX_MILLISECONDS:
        raise StreamIdError(f"stream entry ID {text!r}: milliseconds past {MAX_MILLISECONDS}")
    return ms << SEQUENCE_BITS | seq


def entry_id_of(offset: int) -> str:
    """The ID ``"ms-seq"`` at ``offset`` (the inverse of :func:`offset_of`; offset >= 0)."""
    if offset < 0 or offset > (MAX_MILLISECONDS << SEQUENCE_BITS | MAX_SEQUENCE):
        raise StreamIdError(f"offset {offset} is outside the stream ID range")
    return f"{offset >> SEQUENCE_BITS}-{offset & MAX_SEQUENCE}"


def read_from(position: int) -> str:
    """The exclusive ID to give ``XREAD`` so that it returns the entries at or above ``position``:
    the ID just before it, or ``"0-0"`` (no entry can have it) at position 0 or below."""
    return "0-0" if position <= 0 else entry_id_of(position - 1)


def position_after(entry_id: str | bytes) -> int:
    """The cursor after the entry ``entry_id``: its offset plus one."""
    return offset_of(entry_id) + 1
