from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from laminar_kafka.coordinator.errors import PlacementError
from laminar_kafka.coordinator.vnodes.placement import DEFAULT_STRATEGY, STRATEGIES, balanced, place, rendezvous
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, moved_vnodes
from laminar_kafka.coordinator.vnodes.routing import vnode_loads

# ---------------------------------------------------------------------------------------------- helpers


def node_loads(owners: Sequence[int], nodes: Sequence[int], load: Mapping[int, int]) -> dict[int, int]:
    result = dict.fromkeys(nodes, 0)
    for vnode, weight in load.items():
        result[owners[vnode]] += weight
    return result


def assert_partition_over(owners: Sequence[int], nodes: Sequence[int]) -> None:
    """Every vnode has exactly one owner and it is live (the tuple form already rules out overlap)."""
    assert set(owners) <= set(nodes)
    assert all(owner != UNASSIGNED for owner in owners)


def min_unit_moves(current: Sequence[int], nodes: Sequence[int], members: Sequence[int]) -> int:
    """Lower bound on owner changes among ``members`` (unit weights) for a balanced result."""
    live = set(nodes)
    held = Counter(current[v] for v in members if current[v] in live)
    orphans = sum(1 for v in members if current[v] not in live)
    floor, extra = divmod(len(members), len(live))
    counts = sorted((held.get(n, 0) for n in live), reverse=True)
    quotas = [floor + 1] * extra + [floor] * (len(live) - extra)
    return orphans + sum(max(0, c - q) for c, q in zip(counts, quotas, strict=True))


node_ids = st.integers(min_value=1, max_value=12)
node_sets = st.lists(node_ids, min_size=1, max_size=6, unique=True)


@st.composite
def scenarios(draw: st.DrawFn, unit: bool) -> tuple[list[int], list[int], dict[int, int]]:
    n = draw(st.integers(min_value=1, max_value=96))
    nodes = draw(node_sets)
    # Mostly live owners (so there is something to keep), plus dead nodes (13, 14) and UNASSIGNED.
    owner_pool = sorted(set(nodes)) + [UNASSIGNED, 13, 14]
    current = draw(st.lists(st.sampled_from(owner_pool) | st.integers(0, 12), min_size=n, max_size=n))
    loaded = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    weights = st.just(1) if unit else st.integers(0, 9)
    load = {v: draw(weights) for v in loaded}
    return current, nodes, load


# ------------------------------------------------------------------------------------------ rendezvous


def test_rendezvous_golden_vector() -> None:
    assert list(rendezvous(16, [1, 2, 3])) == [3, 3, 1, 2, 1, 2, 2, 1, 2, 3, 3, 1, 3, 1, 1, 1]
    assert rendezvous(16, [3, 1, 2, 2]) == rendezvous(16, [1, 2, 3])


def test_rendezvous_without_nodes_is_unassigned() -> None:
    assert rendezvous(5, []) == (UNASSIGNED,) * 5


@pytest.mark.parametrize(("count", "nodes"), [(0, [1]), (-1, [1]), (4, [0]), (4, [-2]), (4, [True]), (4, [2**64])])
def test_rendezvous_rejects_bad_input(count: int, nodes: list[int]) -> None:
    with pytest.raises(PlacementError):
        rendezvous(count, nodes)


@given(st.integers(1, 200), node_sets, node_ids)
def test_rendezvous_removal_moves_only_the_removed_nodes_vnodes(n: int, nodes: list[int], extra: int) -> None:
    assume(extra not in nodes)
    with_extra = rendezvous(n, nodes + [extra])
    without = rendezvous(n, nodes)
    for old, new in moved_vnodes(with_extra, without).values():
        assert old == extra and new != extra
    assert set(moved_vnodes(with_extra, without)) == {v for v, o in enumerate(with_extra) if o == extra}


@given(st.integers(1, 200), node_sets, node_ids)
def test_rendezvous_addition_moves_vnodes_only_to_the_new_node(n: int, nodes: list[int], extra: int) -> None:
    assume(extra not in nodes)
    before = rendezvous(n, nodes)
    after = rendezvous(n, nodes + [extra])
    assert all(new == extra for _, new in moved_vnodes(before, after).values())
    assert_partition_over(after, nodes + [extra])


# -------------------------------------------------------------------------------------------- balanced


def test_balanced_spreads_few_partitions_over_many_vnodes() -> None:
    load = vnode_loads("orders_source", [("orders.v1", p) for p in range(8)], 256)
    assert sum(load.values()) == 8
    owners = balanced((UNASSIGNED,) * 256, [1, 2, 3], load)
    assert_partition_over(owners, [1, 2, 3])
    assert sorted(node_loads(owners, [1, 2, 3], load).values()) == [2, 3, 3]
    # Unloaded vnodes are spread too.
    unloaded = Counter(owners[v] for v in range(256) if v not in load)
    assert max(unloaded.values()) - min(unloaded.values()) <= 1


def test_balanced_piles_nothing_on_one_node_even_when_rendezvous_would() -> None:
    # Four loaded vnodes that rendezvous puts all on node 3 (vnodes 0, 1, 9, 10 in the golden vector).
    load = {0: 1, 1: 1, 9: 1, 10: 1}
    assert {rendezvous(16, [1, 2, 3])[v] for v in load} == {3}
    owners = balanced(rendezvous(16, [1, 2, 3]), [1, 2, 3], load)
    assert sorted(node_loads(owners, [1, 2, 3], load).values()) == [1, 1, 2]


def test_balanced_join_moves_exactly_what_evens_out() -> None:
    load = {v: 1 for v in range(0, 64, 2)}  # 32 partitions
    two = balanced((UNASSIGNED,) * 64, [1, 2], load)
    assert node_loads(two, [1, 2], load) == {1: 16, 2: 16}
    three = balanced(two, [1, 2, 3], load)
    moved = {v: m for v, m in moved_vnodes(two, three).items() if v in load}
    assert len(moved) == 10  # 32 = 11 + 11 + 10: node 3 takes 5 from each
    assert all(new == 3 for _, new in moved.values())
    assert sorted(node_loads(three, [1, 2, 3], load).values()) == [10, 11, 11]


def test_balanced_leave_moves_only_the_leavers_loaded_vnodes() -> None:
    load = {v: 1 for v in range(30)}
    three = balanced((UNASSIGNED,) * 32, [1, 2, 3], load)
    two = balanced(three, [1, 3], load)
    moved = {v: m for v, m in moved_vnodes(three, two).items() if v in load}
    assert {old for old, _ in moved.values()} == {2}
    assert len(moved) == 10
    assert node_loads(two, [1, 3], load) == {1: 15, 3: 15}


def test_balanced_without_nodes_is_unassigned() -> None:
    assert balanced((1, 2, 3), [], {0: 4}) == (UNASSIGNED,) * 3


def test_balanced_weighted_example() -> None:
    # Loads 5, 4, 3, 3, 2, 1 = 18 over three nodes: LPT from scratch reaches 6/6/6.
    load = {0: 5, 1: 4, 2: 3, 3: 3, 4: 2, 5: 1}
    owners = balanced((UNASSIGNED,) * 8, [1, 2, 3], load)
    assert node_loads(owners, [1, 2, 3], load) == {1: 6, 2: 6, 3: 6}


def test_balanced_keeps_a_heavy_vnode_that_cannot_help() -> None:
    # One vnode of 10 partitions: moving it only shifts the imbalance, so it stays.
    owners = balanced((2, 1, 1), [1, 2], {0: 10, 1: 1})
    assert owners[0] == 2


@pytest.mark.parametrize(
    ("current", "nodes", "load"),
    [
        ((), [1], {}),
        ((1, -1), [1], {}),
        ((1, 1.5), [1], {}),
        ((1, 1), [0], {}),
        ((1, 1), [1], {2: 1}),
        ((1, 1), [1], {-1: 1}),
        ((1, 1), [1], {0: -1}),
        ((1, 1), [1], {0: True}),
    ],
)
def test_balanced_rejects_bad_input(current: tuple[int, ...], nodes: list[int], load: dict[int, int]) -> None:
    with pytest.raises(PlacementError):
        balanced(current, nodes, load)


@settings(max_examples=150, deadline=None)
@given(scenarios(unit=True))
def test_balanced_unit_loads_even_and_minimal(scenario: tuple[list[int], list[int], dict[int, int]]) -> None:
    current, nodes, load = scenario
    owners = balanced(current, nodes, load)
    assert_partition_over(owners, nodes)
    counts = node_loads(owners, nodes, load)
    assert max(counts.values()) - min(counts.values()) <= 1
    loaded = sorted(load)
    unloaded = [v for v in range(len(current)) if v not in load]
    moved = moved_vnodes(current, owners)
    assert sum(1 for v in moved if v in load) == min_unit_moves(current, nodes, loaded)
    assert sum(1 for v in moved if v not in load) == min_unit_moves(current, nodes, unloaded)
    spread = Counter(owners[v] for v in unloaded)
    per_node = [spread.get(n, 0) for n in nodes]
    assert max(per_node) - min(per_node) <= 1


@settings(max_examples=150, deadline=None)
@given(scenarios(unit=False))
def test_balanced_any_loads_local_optimum(scenario: tuple[list[int], list[int], dict[int, int]]) -> None:
    current, nodes, load = scenario
    owners = balanced(current, nodes, load)
    assert_partition_over(owners, nodes)
    loads = node_loads(owners, nodes, load)
    floor = min(loads.values())
    for vnode, weight in load.items():
        if weight > 0:
            # No single move to a least-loaded node would lower the sum of squared loads.
            assert weight >= loads[owners[vnode]] - floor
    assert max(loads.values()) - floor <= max(load.values(), default=0)
    # Vnodes of dead (or no) nodes always get a live owner.
    live = set(nodes)
    for vnode in load:
        if current[vnode] not in live:
            assert owners[vnode] != current[vnode]


@settings(max_examples=100, deadline=None)
@given(scenarios(unit=False), st.randoms(use_true_random=False))
def test_balanced_is_deterministic_and_idempotent(
    scenario: tuple[list[int], list[int], dict[int, int]], rnd: random.Random
) -> None:
    current, nodes, load = scenario
    owners = balanced(current, nodes, load)
    shuffled_nodes = list(nodes)
    rnd.shuffle(shuffled_nodes)
    items = list(load.items())
    rnd.shuffle(items)
    assert balanced(current, shuffled_nodes + shuffled_nodes[:1], dict(items)) == owners
    assert balanced(list(current), set(nodes), load) == owners
    # Nothing changed -> nothing moves.
    assert balanced(owners, nodes, load) == owners


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 40)), max_size=80),
    st.lists(st.tuples(st.booleans(), node_ids), min_size=1, max_size=12),
)
def test_balanced_membership_sequence(tps: list[tuple[str, int]], events: list[tuple[bool, int]]) -> None:
    """Random joins and leaves over routed partitions: invariants hold after every round."""
    n = 64
    load = vnode_loads("src", tps, n)
    owners: tuple[int, ...] = (UNASSIGNED,) * n
    members: set[int] = set()
    for join, node in events:
        if join:
            members.add(node)
        else:
            members.discard(node)
        new = balanced(owners, sorted(members), load)
        if not members:
            assert new == (UNASSIGNED,) * n
        else:
            assert_partition_over(new, sorted(members))
            counts = node_loads(new, sorted(members), load)
            heaviest = max(load.values(), default=0)
            assert max(counts.values()) - min(counts.values()) <= max(heaviest, 1)
        owners = new


# ----------------------------------------------------------------------------------------------- place


def test_place_dispatches() -> None:
    current = (UNASSIGNED,) * 16
    assert place("rendezvous", current, [1, 2, 3], {0: 5}) == rendezvous(16, [1, 2, 3])
    assert place("balanced", current, [1, 2, 3], {0: 5}) == balanced(current, [1, 2, 3], {0: 5})
    assert DEFAULT_STRATEGY == "balanced"
    assert set(STRATEGIES) == {"balanced", "rendezvous"}


def test_place_rejects_unknown_strategy() -> None:
    with pytest.raises(PlacementError, match="unknown placement strategy 'round-robin'"):
        place("round-robin", (1,), [1], {})
