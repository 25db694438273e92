from __future__ import annotations

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

import laminar_kafka.coordinator.vnodes.rounds as rounds_module
from laminar_kafka.coordinator.errors import RoundError
from laminar_kafka.coordinator.vnodes.registry import AssignmentSnapshot
from laminar_kafka.coordinator.vnodes.rounds import (
    DRAIN_DIGEST_DOMAIN,
    ROUND_ID_WIDTH,
    U64_MAX,
    AssignmentDrainId,
    drain_digest,
    parse_round_id,
    round_id,
)

u64 = st.integers(min_value=0, max_value=U64_MAX)
owner_maps = st.integers(1, 16).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 50), min_size=n, max_size=n),
        st.lists(st.integers(0, 50), min_size=n, max_size=n),
    )
)

# ------------------------------------------------------------------------------------ canonical rules


@pytest.mark.parametrize(
    ("pred", "target", "digest", "canonical"),
    [
        (1, 2, 1, True),
        (41, 42, 0xDEADBEEF, True),
        (U64_MAX - 1, U64_MAX, U64_MAX, True),
        (0, 1, 7, False),  # predecessor 0
        (1, 3, 7, False),  # target skips a version
        (2, 2, 7, False),  # target equals predecessor
        (3, 2, 7, False),  # target goes back
        (1, 2, 0, False),  # digest 0
        (U64_MAX, U64_MAX + 1, 7, False),  # target overflows u64
        (1, 2, U64_MAX + 1, False),  # digest overflows u64
        (-1, 0, 7, False),
        (True, 2, 7, False),
    ],
)
def test_canonical_rules(pred: int, target: int, digest: int, canonical: bool) -> None:
    drain_id = AssignmentDrainId(pred, target, digest)
    assert drain_id.is_canonical() is canonical
    if canonical:
        assert drain_id.require_canonical() is drain_id
    else:
        with pytest.raises(RoundError, match="non-canonical"):
            drain_id.require_canonical()


# ---------------------------------------------------------------------------------------------- digest


def reference_digest(pred: int, before: list[int], after: list[int], token: int) -> int:
    data = b"laminar.coordinator.drain-digest.v1\x00" + pred.to_bytes(8, "little")
    for owners in (before, after):
        data += len(owners).to_bytes(8, "little")
        data += b"".join(o.to_bytes(8, "little") for o in owners)
    data += token.to_bytes(8, "little")
    return xxhash.xxh3_64(data).intdigest() or 1


@given(st.integers(1, 2**40), owner_maps, u64)
def test_digest_matches_documented_encoding(pred: int, maps: tuple[list[int], list[int]], token: int) -> None:
    before, after = maps
    digest = drain_digest(pred, before, after, token)
    assert 1 <= digest <= U64_MAX
    assert digest == reference_digest(pred, before, after, token)
    assert digest == drain_digest(pred, tuple(before), tuple(after), token)


@given(st.integers(1, 2**40), owner_maps, st.integers(0, 2**40), st.data())
def test_digest_is_sensitive_to_each_input(
    pred: int, maps: tuple[list[int], list[int]], token: int, data: st.DataObject
) -> None:
    before, after = maps
    base = drain_digest(pred, before, after, token)
    assert drain_digest(pred + 1, before, after, token) != base
    assert drain_digest(pred, before, after, token + 1) != base
    vnode = data.draw(st.integers(0, len(before) - 1))
    changed_before = list(before)
    changed_before[vnode] += 1
    assert drain_digest(pred, changed_before, after, token) != base
    changed_after = list(after)
    changed_after[vnode] += 1
    assert drain_digest(pred, before, changed_after, token) != base
    if before != after:
        assert drain_digest(pred, after, before, token) != base  # the two maps are not interchangeable


def test_zero_hash_maps_to_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rounds_module.xxhash, "xxh3_64_intdigest", lambda data: 0)
    assert drain_digest(1, [1], [2], 0) == 1


def test_domain_tag() -> None:
    assert DRAIN_DIGEST_DOMAIN == b"laminar.coordinator.drain-digest.v1\0"
    assert len(DRAIN_DIGEST_DOMAIN) == 36


@pytest.mark.parametrize(
    ("pred", "before", "after", "token"),
    [
        (-1, [1], [1], 0),
        (U64_MAX + 1, [1], [1], 0),
        (1, [1], [1], -1),
        (1, [1], [1], U64_MAX + 1),
        (1, [1, 2], [1], 0),
        (1, [-1], [1], 0),
        (1, [1], [U64_MAX + 1], 0),
        (1, [1], [True], 0),
    ],
)
def test_digest_rejects_bad_input(pred: int, before: list[int], after: list[int], token: int) -> None:
    with pytest.raises(RoundError):
        drain_digest(pred, before, after, token)


# -------------------------------------------------------------------------------------------- for_round


def test_for_round() -> None:
    snap = AssignmentSnapshot(4, (1, 2, 3), (1, 4, 2))
    drain_id = AssignmentDrainId.for_round(snap, (1, 2, 2), leader_token=17)
    assert drain_id == AssignmentDrainId(4, 5, drain_digest(4, (1, 2, 3), (1, 2, 2), 17))
    assert drain_id.is_canonical()
    assert AssignmentDrainId.for_round(snap, (1, 2, 2), leader_token=18) != drain_id


def test_for_round_rejects_version_zero_and_bad_targets() -> None:
    with pytest.raises(RoundError, match="version 0"):
        AssignmentDrainId.for_round(AssignmentSnapshot.initial(3), (1, 1, 1), leader_token=1)
    snap = AssignmentSnapshot(1, (1, 1, 1), (1, 1, 1))
    with pytest.raises(RoundError):
        AssignmentDrainId.for_round(snap, (1, 1), leader_token=1)


# ---------------------------------------------------------------------------------------------- codec


@given(st.integers(1, U64_MAX - 1), st.integers(1, U64_MAX))
def test_json_round_trip(pred: int, digest: int) -> None:
    drain_id = AssignmentDrainId(pred, pred + 1, digest)
    encoded = drain_id.to_json()
    assert encoded == {"predecessor_version": pred, "target_version": pred + 1, "digest": digest}
    assert AssignmentDrainId.from_json(encoded) == drain_id


def test_to_json_requires_canonical() -> None:
    with pytest.raises(RoundError):
        AssignmentDrainId(0, 1, 5).to_json()


GOOD = {"predecessor_version": 3, "target_version": 4, "digest": 99}


@pytest.mark.parametrize(
    "data",
    [
        [3, 4, 99],
        "x",
        None,
        {},
        {"predecessor_version": 3, "target_version": 4},
        {**GOOD, "leader": 1},
        {**GOOD, "digest": "99"},
        {**GOOD, "digest": 99.0},
        {**GOOD, "digest": True},
        {**GOOD, "digest": None},
        {**GOOD, "digest": 0},
        {**GOOD, "digest": U64_MAX + 1},
        {**GOOD, "predecessor_version": -3},
        {**GOOD, "target_version": 5},
        {"predecessor_version": 0, "target_version": 1, "digest": 1},
    ],
)
def test_from_json_is_strict(data: object) -> None:
    with pytest.raises(RoundError):
        AssignmentDrainId.from_json(data)  # type: ignore[arg-type]


def test_from_json_accepts_good() -> None:
    assert AssignmentDrainId.from_json(GOOD) == AssignmentDrainId(3, 4, 99)


# -------------------------------------------------------------------------------------------- round ids


def test_round_id_format() -> None:
    assert round_id(42) == "00000000000000000042"
    assert len(round_id(U64_MAX)) == ROUND_ID_WIDTH == 20
    assert round_id(U64_MAX) == str(U64_MAX)
    assert parse_round_id("00000000000000000042") == 42
    assert parse_round_id(round_id(U64_MAX)) == U64_MAX


@given(st.integers(1, U64_MAX), st.integers(1, U64_MAX))
def test_round_id_round_trips_and_sorts_numerically(a: int, b: int) -> None:
    assert parse_round_id(round_id(a)) == a
    assert (round_id(a) < round_id(b)) == (a < b)
    assert round_id(a).isascii() and "/" not in round_id(a)


@pytest.mark.parametrize("version", [0, -1, U64_MAX + 1, True, 1.0, "1"])
def test_round_id_rejects_bad_versions(version: object) -> None:
    with pytest.raises(RoundError):
        round_id(version)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "42",
        "0000000042",
        "000000000000000000042",
        "00000000000000000000",
        "99999999999999999999",
        "+0000000000000000042",
        " 0000000000000000042",
        "0000000000000000042\n",
        "00000000000000000042\n",
        "0000000000000000004٢",
        "round-00000000000042",
        "",
        42,
        None,
    ],
)
def test_parse_round_id_is_strict(name: object) -> None:
    with pytest.raises(RoundError):
        parse_round_id(name)  # type: ignore[arg-type]

