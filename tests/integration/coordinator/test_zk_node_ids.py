"""``node-id auto`` on a real ZooKeeper: ids claimed create-once per identity, a restart keeping its
id, racing claims never sharing one, live members avoided, an ordinal held by another identity
refused, the ACL of the claims, and the coordinator's twin refusal naming how the id was chosen."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.config import CoordinatorConfig, ZkCredentials
from laminar_kafka.coordinator.errors import CoordinatorError, NodeIdTaken
from laminar_kafka.coordinator.layout import NodeIdClaim
from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator
from laminar_kafka.coordinator.zk.node_ids import ClaimedNodeId, ClaimOutcome, claim_in_pipeline
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import config, coordinators, make_chroot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@contextmanager
def session(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=5.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def claim(cfg: CoordinatorConfig, identity: str, host: str = "h", *, wanted: int | None = None,
          preferred: int | None = None) -> ClaimedNodeId:
    """One claim on a session of its own, as a starting node makes it."""
    return claim_in_pipeline(cfg, NodeIdClaim(identity, host), wanted=wanted, preferred=preferred, timeout=15.0)


def race(count: int, work: Callable[[int], ClaimedNodeId]) -> list[ClaimedNodeId | Exception]:
    """``work(i)`` for i < count on as many threads released together; what each returned or raised."""
    barrier = threading.Barrier(count)
    results: list[ClaimedNodeId | Exception] = [CoordinatorError("did not finish")] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except Exception as exc:  # noqa: BLE001 - the test looks at what each thread met
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def claimed(results: list[ClaimedNodeId | Exception]) -> list[ClaimedNodeId]:
    """``results`` when every one is a claim (the test fails with them otherwise)."""
    claims = [r for r in results if isinstance(r, ClaimedNodeId)]
    assert len(claims) == len(results), results
    return claims


@pytest.fixture
def cfg(zookeeper: ZooKeeperHandle, unique: Callable[[str], str]) -> CoordinatorConfig:
    return config(make_chroot(zookeeper.hosts, unique("ids")))


def test_an_identity_claims_one_id_and_a_restart_keeps_it(cfg: CoordinatorConfig) -> None:
    token = "dir:" + "ab" * 16
    assert claim(cfg, "host:alpha", "alpha") == ClaimedNodeId(1, ClaimOutcome.CLAIMED)
    assert claim(cfg, "host:beta", "beta") == ClaimedNodeId(2, ClaimOutcome.CLAIMED)
    assert claim(cfg, token, "alpha") == ClaimedNodeId(3, ClaimOutcome.CLAIMED)  # a state file on host alpha
    assert claim(cfg, "host:alpha", "alpha") == ClaimedNodeId(1, ClaimOutcome.KEPT)  # restarted
    assert claim(cfg, token, "gamma") == ClaimedNodeId(3, ClaimOutcome.KEPT)  # moved to another host with its file
    base = layout.pipeline_path(cfg)
    with session(cfg.hosts) as zk:
        assert sorted(zk.get_children(f"{base}/{layout.NODE_ID_CLAIMS}"), key=int) == ["1", "2", "3"]
        raw, _ = zk.get(f"{base}/{layout.node_id_claim_path(3)}")
        assert layout.parse_node_id_claim(3, raw) == NodeIdClaim(token, "gamma")  # the claim says where it runs now
        raw, _ = zk.get(f"{base}/{layout.node_identity_path('host:beta')}")
        assert layout.parse_node_identity("host:beta", raw) == 2


def test_racing_claims_never_share_an_id(cfg: CoordinatorConfig) -> None:
    others = claimed(race(8, lambda i: claim(cfg, f"host:node{i}")))
    assert sorted(c.node_id for c in others) == list(range(1, 9)), others
    twins = claimed(race(5, lambda i: claim(cfg, "host:twin")))
    assert {c.node_id for c in twins} == {9}, twins
    assert sorted(c.outcome.value for c in twins) == ["claimed"] + ["kept"] * 4
    ordinals = race(4, lambda i: claim(cfg, f"host:set{i}-10", wanted=11))  # four host names with ordinal 10
    assert [r for r in ordinals if isinstance(r, ClaimedNodeId)] == [ClaimedNodeId(11, ClaimOutcome.CLAIMED)], ordinals
    refused = [r for r in ordinals if isinstance(r, NodeIdTaken)]
    assert len(refused) == 3 and all("node id 11 is claimed by another identity" in str(r) for r in refused)
    assert [claim(cfg, f"host:late{i}").node_id for i in range(3)] == [10, 12, 13]  # the ordinal's id is skipped


def test_an_allocation_avoids_live_members_and_prefers_the_recorded_id(cfg: CoordinatorConfig) -> None:
    base = layout.pipeline_path(cfg)
    with session(cfg.hosts) as explicit:  # nodes started with --node-id 1 and 3, which claim nothing
        for node_id in (1, 3):
            explicit.create(f"{base}/{layout.member_path(node_id)}", b"{}", ephemeral=True, makepath=True)
        assert claim(cfg, "host:a").node_id == 2
        assert claim(cfg, "host:b").node_id == 4
        assert claim(cfg, "host:c", preferred=3).node_id == 5  # live as an explicit node
        assert claim(cfg, "host:d", preferred=2).node_id == 6  # another identity's
        assert claim(cfg, "host:e", preferred=42).node_id == 42
        assert claim(cfg, "host:e", preferred=7).node_id == 42  # its own claim comes first
    assert claim(cfg, "host:f").node_id == 1  # the explicit node 1 left


def test_after_the_claims_are_deleted_the_recorded_id_is_claimed_again(cfg: CoordinatorConfig) -> None:
    token = "dir:" + "cd" * 16
    for identity in ("host:a", "host:b", token):
        claim(cfg, identity)
    with session(cfg.hosts) as zk:
        zk.delete(f"{layout.pipeline_path(cfg)}/{layout.NODE_IDS}", recursive=True)
    assert claim(cfg, "host:x").node_id == 1
    assert claim(cfg, token, preferred=3) == ClaimedNodeId(3, ClaimOutcome.CLAIMED)
    # a claim deleted by hand leaves its index behind: the identity claims afresh
    with session(cfg.hosts) as zk:
        zk.delete(f"{layout.pipeline_path(cfg)}/{layout.node_id_claim_path(1)}")
    assert claim(cfg, "host:x") == ClaimedNodeId(1, ClaimOutcome.CLAIMED)


def test_an_ordinal_claimed_by_another_identity_is_refused_live_or_not(cfg: CoordinatorConfig) -> None:
    base = layout.pipeline_path(cfg)
    assert claim(cfg, "host:lake-2", "lake-2", wanted=3) == ClaimedNodeId(3, ClaimOutcome.CLAIMED)
    with pytest.raises(NodeIdTaken) as gone:
        claim(cfg, "host:other-2", "other-2", wanted=3)
    assert str(gone.value) == (
        f"node id 3 is claimed by another identity (host:lake-2 on host lake-2), which no live node runs as now: "
        f"if that node is gone for good, delete {base}/node-ids/ids/3 and {base}/node-ids/identities/host:lake-2")
    with session(cfg.hosts) as running:
        running.create(f"{base}/{layout.member_path(3)}", b"{}", ephemeral=True, makepath=True)
        with pytest.raises(NodeIdTaken, match=r"^node id 3 is held by a live node of another identity "
                                              r"\(host:lake-2 on host lake-2\): stop that node$"):
            claim(cfg, "host:other-2", "other-2", wanted=3)
        assert claim(cfg, "host:lake-2", "lake-2", wanted=3) == ClaimedNodeId(3, ClaimOutcome.KEPT)  # restarted
    with pytest.raises(CoordinatorError, match="host:lake-2 claims node id 3, not 4"):
        claim(cfg, "host:lake-2", "lake-2", wanted=4)
    with session(cfg.hosts) as zk:
        assert zk.get_children(f"{base}/{layout.NODE_ID_CLAIMS}") == ["3"]  # nothing written by the refusals


def test_claims_carry_the_pipelines_acl(zookeeper: ZooKeeperHandle, unique: Callable[[str], str]) -> None:
    credentials = ZkCredentials("laminar", "claims-secret")
    cfg = config(make_chroot(zookeeper.hosts, unique("ids-acl")), credentials=credentials)
    assert claim(cfg, "host:a").node_id == 1
    with session(cfg.hosts) as anonymous:
        with pytest.raises(NoAuthError):
            anonymous.get(f"{layout.pipeline_path(cfg)}/{layout.node_id_claim_path(1)}")


def test_the_twin_refusal_names_how_the_id_was_chosen(cfg: CoordinatorConfig) -> None:
    """A second process of one identity gets the same id; the coordinator refuses it after waiting out
    a previous run's session, and says that node-id auto chose the id."""
    with coordinators(cfg, [1], auto=True):
        twin = ZooKeeperCoordinator(cfg, 1, id_origin="chosen by --node-id auto: host name vm has no ordinal")
        started = time.monotonic()
        try:
            with pytest.raises(NodeIdTaken) as refused:
                twin.start(timeout=1.0)
        finally:
            twin.stop()
        assert 2 * cfg.session_timeout + 9 < time.monotonic() - started < 60
    assert str(refused.value).endswith("another process runs as node 1 (chosen by --node-id auto: host name vm has "
                                       "no ordinal); stop it or choose another --node-id")
