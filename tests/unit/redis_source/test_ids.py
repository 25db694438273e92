"""Stream entry IDs as offsets: the packing keeps the IDs' order, round-trips, and refuses what it
cannot place; XREAD's exclusive start returns exactly the entries at or above a position."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.redis_source.errors import StreamIdError
from laminar_kafka.redis_source.ids import (
    MAX_MILLISECONDS,
    MAX_SEQUENCE,
    entry_id_of,
    offset_of,
    position_after,
    read_from,
)

MS = st.integers(0, MAX_MILLISECONDS)
SEQ = st.integers(0, MAX_SEQUENCE)


@given(MS, SEQ)
def test_an_id_round_trips_through_its_offset(ms: int, seq: int) -> None:
    offset = offset_of(f"{ms}-{seq}")
    assert 0 <= offset < 2**63 and entry_id_of(offset) == f"{ms}-{seq}"
    assert offset_of(f"{ms}-{seq}".encode()) == offset


@given(MS, SEQ, MS, SEQ)
def test_offsets_are_in_the_ids_order(ms1: int, seq1: int, ms2: int, seq2: int) -> None:
    assert ((ms1, seq1) < (ms2, seq2)) == (offset_of(f"{ms1}-{seq1}") < offset_of(f"{ms2}-{seq2}"))


@given(MS, SEQ)
def test_reading_from_the_position_after_an_entry_excludes_it_and_nothing_later(ms: int, seq: int) -> None:
    """XREAD returns IDs strictly above the one given: from ``position_after(id)`` that is exactly
    the entries after ``id``; from an entry's own offset, that entry and the later ones."""
    entry = f"{ms}-{seq}"
    assert read_from(position_after(entry)) == entry
    if offset_of(entry) > 0:
        exclusive = read_from(offset_of(entry))
        assert offset_of(exclusive) == offset_of(entry) - 1


def test_position_zero_reads_from_the_start() -> None:
    assert read_from(0) == "0-0" and read_from(-5) == "0-0" and read_from(1) == "0-0"


@pytest.mark.parametrize("bad", ["", "12", "12-", "-3", "a-1", "1-b", "1-2-3", "+", "*", " 1-2"])
def test_a_malformed_id_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(StreamIdError, match="is not <milliseconds>-<sequence>"):
        offset_of(bad)


def test_a_sequence_past_the_packing_is_refused_not_misplaced() -> None:
    assert offset_of(f"5-{MAX_SEQUENCE}") < offset_of("6-0")
    with pytest.raises(StreamIdError, match="sequence 1048576 is past"):
        offset_of(f"5-{MAX_SEQUENCE + 1}")
    with pytest.raises(StreamIdError, match="milliseconds past"):
        offset_of(f"{MAX_MILLISECONDS + 1}-0")
    with pytest.raises(StreamIdError, match="outside"):
        entry_id_of(-1)
