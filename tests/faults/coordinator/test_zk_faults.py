"""ZooKeeperCoordinator under real faults: a leader's session expiring on the server (its traffic
frozen by a TCP proxy), a standalone server restart, and ensemble servers killed and healed."""
from __future__ import annotations

import time
from typing import Callable

import pytest

from laminar_kafka.coordinator.base import AssignmentChanged, EpochCommitted, SessionState, SessionStateChanged
from laminar_kafka.coordinator.engine.leader_loop import now_ms
from laminar_kafka.coordinator.engine.model import next_step
from laminar_kafka.coordinator.errors import FencedError
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import (
    FreezableProxy,
    SimulatedNode,
    config,
    coordinators,
    leader_of,
    make_chroot,
    wait_until,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]


def test_leader_failover_after_its_session_expires_on_the_server(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    name = unique("zk")
    hosts = make_chroot(zookeeper.hosts, name)
    server = zookeeper.hosts.split(",")[0]
    proxy = FreezableProxy(server)
    session_timeout = 2.0
    leader_cfg = config(f"{proxy.address}/{name}", session_timeout=session_timeout)
    cfg = config(hosts, session_timeout=session_timeout)
    old = ZooKeeperCoordinator(leader_cfg, 1)
    old_node = SimulatedNode(old)
    old.start(timeout=20)  # first candidate: the leader
    try:
        with coordinators(cfg, [2, 3]) as (others, nodes):
            nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2, 3})
            assert old.is_leader()
            lead = old.leadership
            assert lead is not None
            stale_view, stale_version = old.store.read_view(now_ms())

            frozen_at = time.monotonic()
            proxy.freeze()  # the leader can neither send nor receive: its session expires on the server
            wait_until(lambda: any(c.is_leader() for c in others), timeout=session_timeout + 5)
            failover = time.monotonic() - frozen_at
            assert failover <= session_timeout + 1.0, failover
            new_leader = leader_of(others)
            assert new_leader.leadership is not None and new_leader.leadership.token > lead.token
            shed = nodes[others.index(new_leader)].wait_for(AssignmentChanged, lambda e: 1 not in e.snapshot.nodes())
            assert shed.manifest_epoch > 0

            proxy.thaw()
            old_node.wait_for(SessionStateChanged, lambda e: e.state is SessionState.LOST, timeout=10)
            wait_until(lambda: old.client.connected, timeout=10)  # kazoo reconnected on a NEW session
            # The deposed leader's next write, computed from what it last saw, is rejected by ZooKeeper.
            step = next_step(stale_view.__class__(**{**stale_view.__dict__, "now_ms": 2**62}), cfg, lead.token)
            assert step is not None
            before = old.metrics.fenced_writes_rejected
            with pytest.raises(FencedError) as rejected:
                old.execute(lead, step, stale_version)
            assert type(rejected.value.cause).__name__ == "NoNodeError"  # the server: election node gone
            assert old.metrics.fenced_writes_rejected == before + 1
            assert not old.is_leader()

            old.rejoin()  # a new boot id; the pipeline takes it back with a round
            back = nodes[0].wait_for(AssignmentChanged, lambda e: 1 in e.snapshot.nodes()
                                     and e.snapshot.version > shed.snapshot.version)
            nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.assignment_version >= back.snapshot.version
                              and (1, old.boot_id) in e.manifest.acked_by)
    finally:
        old_node.close()
        old.stop()
        proxy.close()


def test_standalone_server_restart_members_reconnect_and_state_is_intact(
    zookeeper_restartable: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper_restartable.hosts, unique("zk"))
    # Keep enough manifests that the one read before the restart is still there after it: with the
    # helpers' 3, garbage collection may take it once three more epochs commit (CI saw that race).
    cfg = config(hosts, session_timeout=10.0, manifests_to_keep=1000)
    with coordinators(cfg, [1, 2, 3]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2, 3})
        boots = {c.node_id: c.boot_id for c in coords}
        before = coords[0].latest_manifest()
        version = coords[0].assignment().version
        assert before is not None

        zookeeper_restartable.restart_server(0)

        mark = len(nodes[0].events)
        after = nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.epoch > before.epoch + 2, timeout=30, after=mark)
        assert {m.node_id: m.boot_id for m in coords[0].members()} == boots  # same sessions, same boots
        assert after.manifest.assignment_version == version  # nothing was shed
        assert coords[0].manifest(before.epoch) == before
        assert not any(isinstance(e, SessionStateChanged) and e.state is SessionState.LOST
                       for n in nodes for e in n.events)


def test_ensemble_progresses_with_one_server_down_stops_without_quorum_and_resumes(
    zookeeper_ensemble: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper_ensemble.hosts, unique("zk"))
    cfg = config(hosts, session_timeout=10.0)
    with coordinators(cfg, [1, 2, 3]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2, 3}, timeout=30)

        zookeeper_ensemble.kill_server(0)
        try:
            mark = len(nodes[0].events)
            one_down = nodes[0].wait_for(EpochCommitted, lambda e: True, timeout=30, after=mark)
            nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.epoch > one_down.manifest.epoch + 2,
                              timeout=30, after=mark)

            marks = [len(node.events) for node in nodes]
            zookeeper_ensemble.kill_server(1)
            try:
                # No quorum: the last server stops serving, every session is SUSPENDED, and a suspended
                # coordinator takes no leader step (its term is withheld) and admits nothing.
                for node, at in zip(nodes, marks, strict=True):
                    node.wait_for(SessionStateChanged, lambda e: e.state is SessionState.SUSPENDED,
                                  timeout=30, after=at)
                suspended = len(nodes[0].events)
            finally:
                zookeeper_ensemble.start_server(1)
        finally:
            zookeeper_ensemble.start_server(0)
        # Between the suspension and the reconnection nothing committed (events are delivered in order),
        # and no second leader was elected (no split brain).
        resumed = nodes[0].wait_for(SessionStateChanged, lambda e: e.state is SessionState.CONNECTED,
                                    timeout=40, after=suspended)
        window = nodes[0].events[suspended:nodes[0].events.index(resumed, suspended)]
        assert not any(isinstance(e, EpochCommitted) for e in window), window
        assert sum(c.metrics.leader_elections_won for c in coords) == 1

        mark = len(nodes[0].events)
        healed = nodes[0].wait_for(EpochCommitted, lambda e: True, timeout=40, after=mark)
        nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.epoch > healed.manifest.epoch + 1, timeout=30, after=mark)
        assert {m.node_id for m in coords[0].members()} == {1, 2, 3}
