"""ZooKeeperCoordinator, membership and acks: a commit fences the members it relies on, retried acks
are idempotent, rejected acks reach their node and a replacement commits, large acks are chunked."""
from __future__ import annotations

import json
from typing import Callable

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import (
    MANIFEST_CHUNK_BYTES,
    AckRejected,
    EpochAck,
    EpochCommitted,
    EpochOpened,
    SessionState,
    SessionStateChanged,
)
from laminar_kafka.coordinator.engine.leader_loop import now_ms
from laminar_kafka.coordinator.engine.model import ack_name, next_step
from laminar_kafka.coordinator.errors import FencedError
from laminar_kafka.coordinator.layout import parse_header
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import (
    SimulatedNode,
    config,
    coordinators,
    expire_session,
    leader_of,
    make_chroot,
    owned_keys,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def quiesce(nodes: list[SimulatedNode]) -> EpochOpened:
    """Stop the simulated nodes acking; return the next epoch to open (it stays open)."""
    for node in nodes:
        node.auto = False
    for node in nodes:
        node.drain()  # every ack in flight has returned: no simulated node acks from here on
    last_acked = max((epoch for node in nodes for epoch in node.acked), default=0)
    return nodes[0].wait_for(EpochOpened, lambda e: e.epoch > last_acked)


def ack(coordinator: ZooKeeperCoordinator, opened: EpochOpened, cursors: dict[str, int],
        outputs: tuple[str, ...] = ()) -> EpochAck:
    value = EpochAck(coordinator.node_id, coordinator.boot_id, opened.epoch, opened.assignment_version,
                     {"s": cursors}, outputs)
    coordinator.ack_epoch(value)
    return value


@pytest.mark.parametrize("how", ["same_session", "expired"])
def test_a_commit_relying_on_a_member_that_rejoined_is_rejected(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], how: str
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts)
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2})
        opened = quiesce(nodes)
        leader = leader_of(coords)
        follower = coords[1] if leader is coords[0] else coords[0]
        lead = leader.leadership
        assert lead is not None
        with leader.pause_leader():  # the leader thread takes no step (a pass in flight has ended)
            for c in coords:
                ack(c, opened, {k: 10 * opened.epoch for k in owned_keys(c.assignment(), c.node_id)})
            view, version = leader.store.read_view(now_ms())
            step = next_step(view, cfg, lead.token)
            assert step is not None and step.kind == "commit_epoch"
            old_boot = follower.boot_id
            assert view.member_fences is not None and view.member_fences[follower.node_id] in step.fences

            fnode = nodes[coords.index(follower)]
            if how == "expired":  # a new session re-creates the member node (data version 0 again)
                expire_session(hosts, follower)
                fnode.wait_for(SessionStateChanged, lambda e: e.state is SessionState.LOST)
            follower.rejoin()
            assert follower.boot_id != old_boot
            with pytest.raises(FencedError) as rejected:
                leader.execute(lead, step, version)
            expected = BadVersionError if how == "same_session" else NoNodeError  # member version / old election node
            assert isinstance(rejected.value.cause, expected), rejected.value.cause
            assert leader.client.get(leader.store.path(layout.ASSIGNMENT))[1].version == version  # nothing was written

        committed = nodes[coords.index(leader)].wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch)
        assert (follower.node_id, old_boot) not in committed.manifest.acked_by


def test_a_retried_ack_is_idempotent_and_a_late_one_is_fenced(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=0.2)
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        c, node = coords[0], nodes[0]
        opened = node.wait_for(EpochOpened)
        sent = ack(c, opened, {k: 1 for k in owned_keys(c.assignment(), 1)})
        node.wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch)
        c.ack_epoch(sent)  # the retry of an ack whose answer was lost: success
        rejected_before = c.metrics.stale_acks_rejected

        late = ZooKeeperCoordinator(cfg, 2)
        late.start(timeout=20)
        try:  # node 2 was not a member when epoch 1 committed: its ack for it is fenced
            with pytest.raises(FencedError):
                late.ack_epoch(EpochAck(2, late.boot_id, opened.epoch, opened.assignment_version, {}))
            assert late.metrics.stale_acks_rejected == 1
        finally:
            late.stop()
        assert c.metrics.stale_acks_rejected == rejected_before


@pytest.mark.parametrize("kind", ["regress", "foreign"])
def test_a_rejected_ack_reaches_its_node_and_a_replacement_commits(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], kind: str
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts)
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2})
        opened = quiesce(nodes)
        victim, other = coords
        mine = owned_keys(victim.assignment(), victim.node_id)
        good = {k: 10 * opened.epoch for k in mine}
        bad = dict(good)
        if kind == "regress":
            bad[mine[0]] = 0  # below the previous manifest's cursor (10 * an earlier epoch > 0)
        else:
            bad[owned_keys(other.assignment(), other.node_id)[0]] = 1
        ack(other, opened, {k: 10 * opened.epoch for k in owned_keys(other.assignment(), other.node_id)})
        mark = len(nodes[0].events)
        ack(victim, opened, bad, ("bad-output",))

        rejected = nodes[0].wait_for(AckRejected, after=mark)
        assert rejected.epoch == opened.epoch
        assert ("regresses" if kind == "regress" else f"is not owned by node {victim.node_id}") in rejected.reason
        markers = victim.client.get_children(victim.store.path(layout.rejected_folder(opened.epoch)))
        assert [m.rsplit(".", 1)[0] for m in markers] == [ack_name(victim.node_id, victim.boot_id)]
        assert json.loads(victim.client.get(
            victim.store.path(layout.rejection_path(opened.epoch, markers[0])))[0]) == {"reason": rejected.reason}

        ack(victim, opened, good, ("good-output",))  # the replacement overwrites the ack node
        committed = nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.epoch == opened.epoch)
        assert committed.manifest.outputs == ("good-output",)
        assert all(committed.manifest.cursors["s"][k] == 10 * opened.epoch for k in mine)
        assert [e for e in nodes[0].events if isinstance(e, AckRejected)] == [rejected]  # once
        assert not any(isinstance(e, AckRejected) for e in nodes[1].events)  # only to its node
        assert leader_of(coords).metrics.extra.get("ack_rejections_recorded") == 1


def test_an_ack_above_the_chunk_size_is_chunked_and_replaced(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=0.2)
    partitions = [f"topic-with-a-long-name:{p}" for p in range(64_000)]  # one node owns every vnode
    with coordinators(cfg, [1], auto=False) as (coords, nodes):
        c, node = coords[0], nodes[0]
        first = node.wait_for(EpochOpened)
        sent = ack(c, first, {k: 7 for k in partitions})
        assert len(sent.to_json()) > 2_000_000
        committed = node.wait_for(EpochCommitted, lambda e: e.manifest.epoch == first.epoch, timeout=30)
        assert committed.manifest.cursors["s"] == {k: 7 for k in partitions}

        second = node.wait_for(EpochOpened, lambda e: e.epoch == first.epoch + 1)
        mark = len(node.events)
        regressing = ack(c, second, {**{k: 8 for k in partitions}, partitions[0]: 6})  # chunked; regresses
        path = c.store.path(layout.ack_path(second.epoch, 1, c.boot_id))
        header = parse_header(c.client.get(path)[0])
        chunks = -(-len(regressing.to_json()) // MANIFEST_CHUNK_BYTES)
        assert header is not None and header.chunks == chunks >= 4
        assert header.size == len(regressing.to_json())
        assert sorted(c.client.get_children(path)) == [f"chunk-{i:04d}" for i in range(chunks)]
        node.wait_for(AckRejected, lambda e: e.epoch == second.epoch, after=mark, timeout=30)
        ack(c, second, {k: 8 for k in partitions})  # a chunked replacement of a chunked ack
        committed = node.wait_for(EpochCommitted, lambda e: e.manifest.epoch == second.epoch, timeout=30)
        assert set(committed.manifest.cursors["s"].values()) == {8}
