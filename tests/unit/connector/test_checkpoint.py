from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.connector.checkpoint import UNNAMED, CursorFormat, SourceCheckpoint, format_key, parse_key
from laminar_kafka.connector.errors import CheckpointError
from laminar_kafka.coordinator.vnodes.routing import TopicPartitionId
from laminar_kafka.kafka_source.checkpoint import KAFKA_CURSORS, CursorCheckpoints

topics = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in (".", ".."))
partitions = st.integers(min_value=0, max_value=2**31 - 1)
offsets = st.integers(min_value=0, max_value=2**63 - 1)
cursors = st.dictionaries(st.tuples(topics, partitions), offsets, max_size=20)
versions = st.integers(min_value=0, max_value=2**64 - 1)


@given(cursors, versions)
def test_round_trip_bytes_and_json(cursor: dict, version: int) -> None:
    checkpoint = SourceCheckpoint.from_partitions(cursor, version)
    assert SourceCheckpoint.from_bytes(checkpoint.to_bytes()) == checkpoint
    assert SourceCheckpoint.from_json(checkpoint.to_json()) == checkpoint
    assert checkpoint.partitions() == cursor
    assert checkpoint.assignment_version == version


@given(cursors)
def test_encoding_is_canonical(cursor: dict) -> None:
    reversed_order = dict(reversed(list(cursor.items())))
    assert SourceCheckpoint.from_partitions(cursor).to_bytes() == SourceCheckpoint.from_partitions(
        reversed_order
    ).to_bytes()


@given(topics, partitions)
def test_key_round_trip(topic: str, partition: int) -> None:
    assert parse_key(format_key(topic, partition)) == (topic, partition)


def test_next_offset_convention_is_last_emitted_plus_one() -> None:
    # The documented convention: a partition whose last emitted offset is 41 resumes at 42.
    last_emitted = 41
    checkpoint = SourceCheckpoint.from_partitions({("orders", 3): last_emitted + 1}, connector="kafka")
    assert checkpoint.next_offset("orders", 3) == 42
    assert checkpoint.next_offset("orders", 4) is None
    assert checkpoint.to_dict() == {
        "connector": "kafka",
        "format_version": 1,
        "assignment_version": 0,
        "offsets": {"orders:3": 42},
    }


def test_empty() -> None:
    assert SourceCheckpoint.empty().is_empty
    assert not SourceCheckpoint.from_partitions({("t", 0): 0}).is_empty


def _doc(**overrides: object) -> dict:
    doc: dict = {"connector": "kafka", "format_version": 1, "assignment_version": 0, "offsets": {"t:0": 5}}
    doc.update(overrides)
    return doc


@pytest.mark.parametrize(
    "doc",
    [
        _doc(extra=1),
        {k: v for k, v in _doc().items() if k != "offsets"},
        _doc(connector="Kafka"),
        _doc(connector="kafka!"),
        _doc(connector="k" * 65),
        _doc(connector=1),
        _doc(format_version=2),
        _doc(format_version="1"),
        _doc(format_version=True),
        _doc(assignment_version=-1),
        _doc(assignment_version=2**64),
        _doc(assignment_version=1.0),
        _doc(assignment_version=None),
        _doc(offsets=[]),
        _doc(offsets={"t:0": -1}),
        _doc(offsets={"t:0": 2**63}),
        _doc(offsets={"t:0": "5"}),
        _doc(offsets={"t:0": True}),
        _doc(offsets={"t:0": None}),
        _doc(offsets={"t": 5}),
        _doc(offsets={"t:": 5}),
        _doc(offsets={":0": 5}),
        _doc(offsets={"t:-1": 5}),
        _doc(offsets={"t:01": 5}),
        _doc(offsets={"t:+1": 5}),
        _doc(offsets={"t:2147483648": 5}),
        _doc(offsets={"bad topic:0": 5}),
        _doc(offsets={"t/x:0": 5}),
        _doc(offsets={"..:0": 5}),
        [],
        "checkpoint",
    ],
)
def test_strict_decoding_rejects(doc: object) -> None:
    with pytest.raises(CheckpointError):
        SourceCheckpoint.from_json(json.dumps(doc))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"{",
        b'{"connector":"kafka","format_version":1,"assignment_version":0,"offsets":{"t:0":1.5}}',
        b'{"connector":"kafka","format_version":1,"assignment_version":0,"offsets":{"t:0":NaN}}',
        b'{"connector":"kafka","connector":"kafka","format_version":1,"assignment_version":0,"offsets":{}}',
        b'{"connector":"kafka","format_version":1,"assignment_version":0,"offsets":{"t:0":1,"t:0":2}}',
    ],
)
def test_strict_decoding_rejects_bytes(raw: bytes) -> None:
    with pytest.raises(CheckpointError):
        SourceCheckpoint.from_bytes(raw)


def test_from_bytes_rejects_text() -> None:
    with pytest.raises(CheckpointError):
        SourceCheckpoint.from_bytes("{}")  # type: ignore[arg-type]


def test_constructor_validates_and_freezes() -> None:
    with pytest.raises(CheckpointError):
        SourceCheckpoint({"t:0": -5})
    with pytest.raises(CheckpointError):
        SourceCheckpoint.from_partitions({("t", -1): 0})
    checkpoint = SourceCheckpoint({"b:1": 2, "a:0": 1})
    assert list(checkpoint.offsets) == ["a:0", "b:1"]
    with pytest.raises(TypeError):
        checkpoint.offsets["a:0"] = 5  # type: ignore[index]
    assert hash(checkpoint) == hash(SourceCheckpoint({"a:0": 1, "b:1": 2}))


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    try:
        SourceCheckpoint.from_bytes(data)
    except CheckpointError:
        pass


def test_keys_and_json_share_the_coordinator_codec() -> None:
    """One implementation of the cursor key and of strict JSON for checkpoints and manifests."""
    from laminar_kafka.coordinator.codec import parse_partition_key
    from laminar_kafka.coordinator.errors import CodecError

    for key in ["t:01", "t:-1", "a/b:0", "t:2147483648", ":0", "t", ".:0"]:
        with pytest.raises(CheckpointError):
            parse_key(key)
        with pytest.raises(CodecError):
            parse_partition_key(key)
    assert parse_key("t.x-1:5") == parse_partition_key("t.x-1:5") == ("t.x-1", 5)
    good = '{"connector":"kafka","format_version":1,"assignment_version":2,"offsets":{"t:0":7}}'
    assert SourceCheckpoint.from_json(good).offsets == {"t:0": 7}
    for bad in (good.replace('"t:0":7', '"t:0":7.0'), good.replace('"t:0":7', '"t:0":true'),
                good.replace("}}", '},"offsets":{}}'), good.replace('"t:0":7', '"t:0":NaN')):
        with pytest.raises(CheckpointError):
            SourceCheckpoint.from_json(bad)


# -- CursorCheckpoints: the per-batch checkpoint of a source's cursor --------------------------------

_cursors = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "orders", "t.x"]), st.integers(0, 40)), st.integers(0, 2**40), max_size=30
)


@given(st.lists(st.tuples(_cursors, st.integers(0, 2**20)), min_size=1, max_size=6))
def test_cursor_checkpoints_equal_from_partitions_in_every_way(steps: list[tuple[dict[tuple[str, int], int], int]]) -> None:
    checkpoints = CursorCheckpoints()
    for cursor, version in steps:
        for _ in range(2):  # the second call reuses the keys of the first
            built, expected = checkpoints.of(cursor, version), KAFKA_CURSORS.stamp(cursor, version)
            assert built == expected
            assert list(built.offsets.items()) == list(expected.offsets.items())  # same key order
            assert built.to_dict() == expected.to_dict() and hash(built) == hash(expected)


def test_cursor_checkpoints_follow_a_cursor_whose_partitions_change() -> None:
    checkpoints = CursorCheckpoints()
    assert checkpoints.of({("t", 2): 5, ("t", 10): 1}, 3).offsets == {"t:10": 1, "t:2": 5}
    assert list(checkpoints.of({("t", 2): 6, ("t", 10): 1, ("u", 0): 0}, 3).offsets) == ["t:10", "t:2", "u:0"]
    assert checkpoints.of({}, 4) == SourceCheckpoint.empty(4, "kafka")
    with pytest.raises(CheckpointError):
        checkpoints.of({("t", 1): 0}, -1)


# -- the connector's name and cursor hook (CursorFormat) -------------------------------------------


def test_a_checkpoint_is_named_by_its_connector_and_unnamed_by_default() -> None:
    assert SourceCheckpoint.from_partitions({("t", 0): 1}).connector == UNNAMED
    assert KAFKA_CURSORS.stamp({("t", 0): 1}, 2) == SourceCheckpoint({"t:0": 1}, 2, "kafka")
    named = CursorFormat("redis").stamp({("s", 1): 9})
    assert named.connector == "redis" and SourceCheckpoint.from_bytes(named.to_bytes()) == named
    assert named != SourceCheckpoint({"s:1": 9}, 0, "kafka")  # the name is part of the value


def test_a_connector_accepts_its_own_unnamed_and_the_names_it_also_reads() -> None:
    redis = CursorFormat("redis", also_reads=frozenset({"kafka"}))
    for name in ("redis", UNNAMED, "kafka"):
        checkpoint = SourceCheckpoint({"s:0": 3}, 1, name)
        assert redis.accept(checkpoint) is checkpoint
    with pytest.raises(CheckpointError, match="belongs to connector 'memory', not 'redis'"):
        redis.accept(SourceCheckpoint({"s:0": 3}, 1, "memory"))
    with pytest.raises(CheckpointError, match="belongs to connector 'redis', not 'kafka'"):
        KAFKA_CURSORS.decode(SourceCheckpoint({"s:0": 3}, 1, "redis").to_bytes())


def test_a_connector_checks_its_cursors_through_its_hook() -> None:
    class EvenPositions(CursorFormat):
        def check_cursor(self, partition: TopicPartitionId, position: int) -> None:
            if position % 2:
                raise CheckpointError(f"odd position {position} of {partition}")

    even = EvenPositions("even")
    assert even.accept(SourceCheckpoint({"t:0": 2, "t:1": 4})).offsets == {"t:0": 2, "t:1": 4}
    with pytest.raises(CheckpointError, match="odd position 3"):
        even.accept(SourceCheckpoint({"t:0": 2, "t:1": 3}, 0, "even"))


@pytest.mark.parametrize("name", ["", "Kafka", "kafka source", "9lives", "k" * 65])
def test_a_connector_name_is_lower_case_and_short(name: str) -> None:
    with pytest.raises(CheckpointError):
        CursorFormat(name)
    with pytest.raises(CheckpointError):
        CursorFormat("ok", also_reads=frozenset({name}))
