"""Digest ACLs on a pipeline's subtree, against the session's real ZooKeeper (a chroot per test).

A coordinator with credentials creates every node of ``/laminar/<pipeline>`` with its digest ACL;
a client without them, or with wrong ones, can neither read nor write any node there; a coordinator
without them fails to start with one clear error. The password is in no node's data and no log line.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from laminar_kafka.coordinator.base import (
    AssignmentChanged,
    EpochCommitted,
    RoundDecided,
    RoundOutcome,
    initial_manifest,
)
from laminar_kafka.coordinator.config import ZkCredentials
from laminar_kafka.coordinator.errors import AccessDeniedError
from laminar_kafka.coordinator.zk.auth import open_client
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import SimulatedNode, config, coordinators, make_chroot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SECRET = "Zk-acl-Pa55word-7f3e1c"


@contextmanager
def session(hosts: str, credentials: ZkCredentials | None) -> Iterator[KazooClient]:
    client = open_client(hosts, 5.0, credentials)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def walk(client: KazooClient, path: str) -> list[str]:
    """``path`` and every node below it, parents first."""
    result = [path]
    for child in sorted(client.get_children(path)):
        result.extend(walk(client, f"{path}/{child}"))
    return result


def assert_denied_everywhere(client: KazooClient, paths: list[str]) -> None:
    for path in paths:
        for name, attempt in (
            ("get", lambda p: client.get(p)),
            ("get_children", lambda p: client.get_children(p)),
            ("get_acls", lambda p: client.get_acls(p)),
            ("set", lambda p: client.set(p, b"intruder")),
            ("create", lambda p: client.create(f"{p}/intruder", b"intruder")),
            ("delete", lambda p: client.delete(p)),
        ):
            with pytest.raises(NoAuthError):
                attempt(path)
                pytest.fail(f"{name} {path} was allowed")


def test_only_the_credentials_can_read_or_write_the_subtree(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hosts = make_chroot(zookeeper.hosts, unique("zkacl"))
    credentials = ZkCredentials("laminar", SECRET)
    cfg = config(hosts, credentials=credentials)
    base = cfg.base_path
    with coordinators(cfg, [1, 2]) as (coords, nodes):
        coords[0].pin_start(initial_manifest({"s": {f"t:{p}": 0 for p in range(2 * cfg.vnode_count)}}))
        coords[0].pin_topic_ids({"t": "topic-id-of-t"})
        coords[1].pin_setting("json.schema", "id:int64")
        coords[1].set_vnode_load({v: 2 for v in range(cfg.vnode_count)})
        nodes[0].wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2})
        third = ZooKeeperCoordinator(cfg, 3)  # a round: round records, drain receipts, a decision
        node3 = SimulatedNode(third)
        mark = len(nodes[0].events)
        third.start(timeout=20)
        try:
            decided = nodes[0].wait_for(RoundDecided, after=mark)
            assert decided.outcome is RoundOutcome.COMMIT
            node3.wait_for(AssignmentChanged, lambda e: 3 in e.snapshot.nodes())
            last = node3.wait_for(EpochCommitted, lambda e: {n for n, _ in e.manifest.acked_by} == {1, 2, 3})

            with ExitStack() as paused:  # no leader step deletes nodes while the tree is walked
                for coordinator in coords + [third]:
                    paused.enter_context(coordinator.pause_leader())
                with session(hosts, credentials) as owner:
                    paths = walk(owner, base)
                    kinds = {p[len(base) + 1:].split("/")[0] for p in paths if p != base}
                    assert {"members", "leader", "assignment", "vnode_load", "rounds", "epochs", "checkpoints",
                            "topics", "settings", "locks"} <= kinds
                    assert any("/ready/" in p for p in paths) and any("/acks/" in p for p in paths)
                    assert any(owner.exists(p).ephemeralOwner for p in paths)  # members and candidates too
                    for path in paths:
                        assert owner.get_acls(path)[0] == credentials.acl(), path
                        assert SECRET.encode() not in owner.get(path)[0], path
                    parent_acl = owner.get_acls(cfg.root)[0]
                    assert sorted(parent_acl, key=str) == sorted(credentials.parent_acl(), key=str)

                with session(hosts, None) as anonymous:
                    assert_denied_everywhere(anonymous, paths)
                with session(hosts, ZkCredentials("laminar", "not-the-password")) as wrong_password:
                    assert_denied_everywhere(wrong_password, paths)
                with session(hosts, ZkCredentials("intruder", SECRET)) as wrong_user:
                    assert_denied_everywhere(wrong_user, paths[:3])

            # The pipeline keeps working: another epoch commits with all three nodes.
            node3.wait_for(EpochCommitted, lambda e: e.manifest.epoch > last.manifest.epoch
                           and {n for n, _ in e.manifest.acked_by} == {1, 2, 3})
        finally:
            node3.close()
            third.stop()
        for node in nodes + [node3]:
            assert node.errors == []
    assert SECRET not in caplog.text


def test_a_coordinator_without_the_credentials_fails_with_one_clear_error(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    hosts = make_chroot(zookeeper.hosts, unique("zkacl"))
    credentials = ZkCredentials("laminar", SECRET)
    cfg = config(hosts, credentials=credentials)
    with coordinators(cfg, [1]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted)
        for wrong in (None, ZkCredentials("laminar", "not-the-password"), ZkCredentials("intruder", SECRET)):
            intruder = ZooKeeperCoordinator(config(hosts, credentials=wrong), 2)
            try:
                with pytest.raises(AccessDeniedError) as info:
                    intruder.start(timeout=20)
            finally:
                intruder.stop()  # harmless after a failed start; stops a wrongly started one
            assert str(info.value) == "ZooKeeper denied access to /laminar/p: credentials missing or wrong"
            assert SECRET not in repr(info.value)
        assert [m.node_id for m in coords[0].members()] == [1]

        # Another pipeline with other credentials can live beside it under the shared root.
        neighbour = config(hosts, pipeline="q", credentials=ZkCredentials("other", "other-password"))
        with coordinators(neighbour, [1]) as (_, neighbour_nodes):
            neighbour_nodes[0].wait_for(EpochCommitted)
        committed = nodes[0].wait_for(EpochCommitted, after=len(nodes[0].events))
        assert committed.manifest.acked_by
    assert SECRET not in caplog.text


def test_without_credentials_the_subtree_stays_open(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zkacl"))
    cfg = config(hosts)
    with coordinators(cfg, [1]) as (coords, nodes):
        nodes[0].wait_for(EpochCommitted)
        with session(hosts, None) as anonymous, ExitStack() as paused:
            paused.enter_context(coords[0].pause_leader())
            for path in walk(anonymous, cfg.base_path):
                anonymous.get(path)
                assert [(a.id.scheme, a.perms) for a in anonymous.get_acls(path)[0]] == [("world", 31)]
    # Credentials configured later: the open subtree still works, and a warning says it stays open.
    caplog.set_level(logging.WARNING, logger="laminar_kafka.coordinator.zk.auth")
    with coordinators(config(hosts, credentials=ZkCredentials("laminar", SECRET)), [1]) as (_, nodes):
        nodes[0].wait_for(EpochCommitted)
    assert "created without credentials" in caplog.text
