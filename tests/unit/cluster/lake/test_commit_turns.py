"""Who commits an epoch's tables first: the nodes that acked it take turns by epoch number."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from laminar_kafka.cluster.lake.commits import committer_of


def test_the_acking_nodes_take_turns_in_id_order() -> None:
    assert [committer_of(epoch, [3, 1, 2]) for epoch in range(1, 7)] == [2, 3, 1, 2, 3, 1]
    assert committer_of(5, [4]) == 4


def test_no_acking_node_means_every_node_commits() -> None:
    assert committer_of(0, []) is None


@given(st.integers(1, 10**6), st.lists(st.integers(1, 50), min_size=1, max_size=8))
def test_exactly_one_acking_node_has_the_turn_whatever_the_order_and_repeats(epoch: int, nodes: list[int]) -> None:
    committer = committer_of(epoch, nodes)
    assert committer in nodes
    assert committer_of(epoch, list(reversed(nodes)) + nodes) == committer  # the same on every node


@given(st.lists(st.integers(1, 50), min_size=1, max_size=8, unique=True))
def test_every_acking_node_gets_a_turn_within_as_many_epochs(nodes: list[int]) -> None:
    assert {committer_of(epoch, nodes) for epoch in range(100, 100 + len(nodes))} == set(nodes)
