"""Placement: which live node owns each vnode.

Two strategies, both pure and deterministic (the output depends only on the values passed, never on
set or dict iteration order):

``rendezvous(vnode_count, nodes)``
    Highest random weight: vnode ``v`` goes to the node ``n`` maximising
    ``xxh3_64(u64le(v) + u64le(n))`` (seed 0), ties to the higher node id. A membership change moves
    only the vnodes it must: removing a node moves exactly its vnodes, adding one moves vnodes only to
    it. It ignores load, so few partitions over many vnodes can land unevenly.

``balanced(current, nodes, vnode_load)`` (the default)
    Spreads the vnodes that carry partitions so partition counts per node are as even as vnode
    granularity allows, keeping as many loaded vnodes where they are as it can. Guarantees:

    1. The result is a partition of the vnodes over the live nodes: every vnode has exactly one owner,
       a live node (all :data:`UNASSIGNED` when there is no live node).
    2. Unit loads (every loaded vnode carries exactly one partition, the usual case with fewer
       partitions than vnodes): per-node partition counts differ by at most one, and the number of
       loaded vnodes whose owner changes is the minimum possible: the loaded vnodes not on a live node,
       plus ``sum(max(0, c_n - q_n))`` where ``c_n`` is what live node ``n`` holds now and the quotas
       ``q_n`` (``floor(P/N)`` or ``ceil(P/N)``) give the larger quota to the nodes holding most.
    3. Any loads: a loaded vnode already on a live node is never moved unless the move strictly
       lowers the sum of squared node loads, and at the end no single move from any node to a
       least-loaded node would (a local optimum). Hence for every node ``n`` each loaded vnode on
       ``n`` weighs at least ``load(n) - min_load``, so ``max_load - min_load`` is at most the
       lightest vnode on the most loaded node, and at most the heaviest vnode load. (Exact minimum
       spread for arbitrary weights is NP-hard; this is the greedy bound.)
    4. Unloaded vnodes are balanced the same way as a separate unit-load class: each live node holds
       ``floor(U/N)`` or ``ceil(U/N)`` of the ``U`` unloaded vnodes, moving the fewest. (So total vnode
       counts per node differ by at most two.)
    5. Nothing changes when nothing needs to: the result is a fixed point
       (``balanced(balanced(c, N, L), N, L) == balanced(c, N, L)``), and any ``current`` that already
       meets the end condition of the algorithm below (every vnode on a live node, no improving move)
       is returned unchanged.

    Algorithm (per class): keep every vnode owned by a live node; hand the orphans (vnodes of dead or
    no nodes), heaviest first, each to a currently least-loaded node; then, while some node ``d``
    holds a vnode of weight ``w`` with ``0 < w < load(d) - min_load``, move the one whose weight is
    closest to half that gap from the most loaded such node to the least loaded node. Ties break by
    node id, then vnode id. Each move lowers the sum of squared loads, so it terminates.

This module does no I/O.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import xxhash

from laminar_kafka.coordinator.codec import is_int
from laminar_kafka.coordinator.errors import PlacementError
from laminar_kafka.coordinator.vnodes.registry import UNASSIGNED, NodeId

__all__ = ["STRATEGIES", "DEFAULT_STRATEGY", "rendezvous", "balanced", "place"]

STRATEGIES: tuple[str, ...] = ("balanced", "rendezvous")
DEFAULT_STRATEGY: str = "balanced"


def _live_nodes(nodes: Iterable[NodeId]) -> list[NodeId]:
    """Sorted distinct node ids; every id must be a positive u64."""
    result = set()
    for node in nodes:
        if not is_int(node) or not 1 <= node < 2**64:
            raise PlacementError(f"node id {node!r} must be an int in 1..2**64-1 (0 means unassigned)")
        result.add(node)
    return sorted(result)


def _weight(vnode: int, node: NodeId) -> int:
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", vnode, node))


def rendezvous(vnode_count: int, nodes: Iterable[NodeId]) -> tuple[NodeId, ...]:
    """Highest-random-weight owner of each of ``vnode_count`` vnodes among ``nodes``.

    Pre: ``vnode_count >= 1``, node ids positive. Post: ``len(result) == vnode_count``; every entry is
    one of ``nodes``, or :data:`UNASSIGNED` everywhere if ``nodes`` is empty.
    """
    if not is_int(vnode_count) or vnode_count < 1:
        raise PlacementError(f"vnode_count {vnode_count!r} must be an int >= 1")
    live = _live_nodes(nodes)
    if not live:
        return (UNASSIGNED,) * vnode_count
    return tuple(max(live, key=lambda node: (_weight(vnode, node), node)) for vnode in range(vnode_count))


def _balance_class(
    owners: list[NodeId], members: Sequence[int], weight: Mapping[int, int], live: list[NodeId]
) -> None:
    """Balance the vnodes in ``members`` (with positive ``weight``) over ``live`` in place in ``owners``."""
    live_set = set(live)
    load = dict.fromkeys(live, 0)
    held: dict[NodeId, set[int]] = {node: set() for node in live}
    orphans: list[int] = []
    for vnode in members:
        owner = owners[vnode]
        if owner in live_set:
            load[owner] += weight[vnode]
            held[owner].add(vnode)
        else:
            orphans.append(vnode)

    def least_loaded() -> NodeId:
        return min(live, key=lambda node: (load[node], node))

    for vnode in sorted(orphans, key=lambda v: (-weight[v], v)):
        node = least_loaded()
        owners[vnode] = node
        load[node] += weight[vnode]
        held[node].add(vnode)

    while True:
        target = least_loaded()
        floor = load[target]
        move: tuple[int, NodeId] | None = None
        for donor in sorted(live, key=lambda node: (-load[node], node)):
            gap = load[donor] - floor
            if gap < 2:
                break  # donors are sorted by load: no later one has a larger gap
            candidates = [v for v in held[donor] if weight[v] < gap]
            if candidates:
                vnode = min(candidates, key=lambda v: (abs(2 * weight[v] - gap), weight[v], v))
                move = (vnode, donor)
                break
        if move is None:
            return
        vnode, donor = move
        held[donor].remove(vnode)
        held[target].add(vnode)
        load[donor] -= weight[vnode]
        load[target] += weight[vnode]
        owners[vnode] = target


def balanced(
    current: Sequence[NodeId], nodes: Iterable[NodeId], vnode_load: Mapping[int, int]
) -> tuple[NodeId, ...]:
    """Load-balanced owner map with minimal movement from ``current``; see the module docstring.

    ``current[v]`` is the present owner of vnode ``v`` (``len(current)`` is the vnode count);
    ``vnode_load[v]`` is the number of partitions vnode ``v`` carries (absent means 0).
    Raises :class:`PlacementError` on an empty ``current``, a negative owner, a non-positive node id,
    a load key outside the vnode range, or a negative load.
    """
    owners = list(current)
    vnode_count = len(owners)
    if vnode_count < 1:
        raise PlacementError("current owner map must cover at least one vnode")
    for vnode, owner in enumerate(owners):
        if not is_int(owner) or owner < 0:
            raise PlacementError(f"current[{vnode}] = {owner!r} is not a node id (int >= 0)")
    for vnode, weight in vnode_load.items():
        if not is_int(vnode) or not 0 <= vnode < vnode_count:
            raise PlacementError(f"vnode_load key {vnode!r} outside 0..{vnode_count - 1}")
        if not is_int(weight) or weight < 0:
            raise PlacementError(f"vnode_load[{vnode}] = {weight!r} must be an int >= 0")
    live = _live_nodes(nodes)
    if not live:
        return (UNASSIGNED,) * vnode_count

    loaded = [v for v in range(vnode_count) if vnode_load.get(v, 0) > 0]
    unloaded = [v for v in range(vnode_count) if vnode_load.get(v, 0) == 0]
    _balance_class(owners, loaded, {v: vnode_load[v] for v in loaded}, live)
    _balance_class(owners, unloaded, dict.fromkeys(unloaded, 1), live)
    return tuple(owners)


def place(
    strategy: str,
    current: Sequence[NodeId],
    nodes: Iterable[NodeId],
    vnode_load: Mapping[int, int],
) -> tuple[NodeId, ...]:
    """Dispatch to :func:`balanced` or :func:`rendezvous` (which ignores ``current`` and the loads).

    Raises :class:`PlacementError` for a strategy not in :data:`STRATEGIES`.
    """
    if strategy == "balanced":
        return balanced(current, nodes, vnode_load)
    if strategy == "rendezvous":
        return rendezvous(len(current), nodes)
    raise PlacementError(f"unknown placement strategy {strategy!r}; expected one of {list(STRATEGIES)}")
