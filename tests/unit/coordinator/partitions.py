"""Helpers of the model tests: the test pipeline's partitions, one leader step on a MemoryStore
(the store adapter with ZooKeeper's semantics that executes steps exactly as the backends do), and a
first committed epoch."""
from __future__ import annotations

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.engine.model import Step, next_step
from laminar_kafka.coordinator.local.memory_store import MemoryStore
from laminar_kafka.coordinator.state import ControlState
from laminar_kafka.coordinator.values import EpochAck, Manifest, Member
from laminar_kafka.coordinator.vnodes.routing import partitions_by_vnode


def leader_step(store: MemoryStore, config: CoordinatorConfig, now_ms: int) -> Step | None:
    """Run one step of the current leader; returns the applied step (None: nothing to do)."""
    term = store.leader()
    if term is None:
        return None
    view, version = store.read_view(now_ms)
    step = next_step(view, config, term.token)
    if step is not None:
        store.apply(term, step, version)
    return step


#: The test pipeline's partitions: topic "t" of source identity "s" (24 partitions cover all 8 vnodes).
SOURCE, TOPIC, PARTITIONS = "s", "t", range(24)


def partition_table(vnode_count: int) -> dict[int, tuple[str, ...]]:
    """``{vnode: ("t:p", ...)}`` for the test partitions, routed by the routing ABI."""
    groups = partitions_by_vnode(SOURCE, [(TOPIC, p) for p in PARTITIONS], vnode_count)
    return {v: tuple(f"{t}:{p}" for t, p in tps) for v, tps in groups.items()}


def owned_keys(owners: tuple[int, ...], node: int) -> list[str]:
    """The test partitions whose vnode `node` owns under `owners`."""
    table = partition_table(len(owners))
    return sorted(k for v, keys in table.items() if owners[v] == node for k in keys)


def commit_first_epoch(store: MemoryStore, config: CoordinatorConfig, member: Member, offset: int = 5) -> ControlState:
    """``member`` joins ``store``; the leader pins the start, publishes the assignment, opens epoch 1,
    and commits it on ``member``'s ack of ``offset`` for every test partition. Returns the register."""
    store.register(member)
    store.pin_initial(Manifest(epoch=0, assignment_version=0, cursors={}))
    now = 1_000_000
    for _ in range(10):
        if leader_step(store, config, now) is not None:
            continue
        control = store.read_register()
        assert control is not None
        if control.last_epoch:
            return control
        if control.open_epoch:
            keys = owned_keys(control.snapshot.owners, member.node_id)
            store.write_ack(EpochAck(member.node_id, member.boot_id, control.open_epoch, control.version,
                                     {SOURCE: {k: offset for k in keys}}, ("output",)))
        now += int(config.checkpoint_interval * 1000) + 500
    raise AssertionError("epoch 1 was not committed")
