"""``choose_node_id``: the rule with its state file, ZooKeeper's claim replaced by a recording fake
(tests/integration/coordinator/test_zk_node_ids.py claims on a real ZooKeeper)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from laminar_kafka.cluster import auto_node_id
from laminar_kafka.cluster.auto_node_id import choose_node_id
from laminar_kafka.cluster.config import NodeSettings, settings_from
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.node_identity import NodeIdScheme
from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.errors import AccessDeniedError, CoordinatorUnavailable, NodeIdTaken
from laminar_kafka.coordinator.layout import NodeIdClaim
from laminar_kafka.coordinator.zk.node_ids import ClaimedNodeId, ClaimOutcome
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out", "node-id": "auto"}


@dataclass
class FakeZooKeeper:
    """Claims by identity, as ZooKeeper would keep them (no races here: the integration test has those)."""

    ids: dict[str, int] = field(default_factory=dict)
    calls: list[tuple[NodeIdClaim, int | None, int | None]] = field(default_factory=list)
    fail: BaseException | None = None

    def claim(self, config: CoordinatorConfig, claim: NodeIdClaim, *, wanted: int | None = None,
              preferred: int | None = None, timeout: float = 10.0) -> ClaimedNodeId:
        self.calls.append((claim, wanted, preferred))
        if self.fail is not None:
            raise self.fail
        if claim.identity in self.ids and wanted in (None, self.ids[claim.identity]):
            return ClaimedNodeId(self.ids[claim.identity], ClaimOutcome.KEPT)
        taken = set(self.ids.values())
        node_id = wanted or (preferred if preferred and preferred not in taken else
                             min(n for n in range(1, 100) if n not in taken))
        self.ids[claim.identity] = node_id
        return ClaimedNodeId(node_id, ClaimOutcome.CLAIMED)


@pytest.fixture
def zk(monkeypatch: pytest.MonkeyPatch) -> FakeZooKeeper:
    fake = FakeZooKeeper()
    monkeypatch.setattr(auto_node_id, "claim_in_pipeline", fake.claim)
    return fake


def settings(**more: Any) -> NodeSettings:
    return settings_from({**BASE, "zk": "z:2181", "pipeline": "p", **more}, {}, {})


def test_embedded_mode_takes_1_without_zookeeper(zk: FakeZooKeeper, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=auto_node_id.__name__)
    choice = choose_node_id(settings_from(BASE, {}, {}), "lake-4")
    assert (choice.node_id, choice.scheme) == (1, NodeIdScheme.EMBEDDED) and zk.calls == []
    assert [r.getMessage() for r in caplog.records] == ["node id 1 (node-id auto: embedded mode has one node)"]


def test_an_ordinal_is_claimed_for_the_host_name(zk: FakeZooKeeper, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=auto_node_id.__name__)
    choice = choose_node_id(settings(state_dir=str(tmp_path)), "Lake-2.lake.svc")
    assert (choice.node_id, choice.scheme, choice.identity) == (3, NodeIdScheme.ORDINAL, "host:lake-2.lake.svc")
    assert zk.calls == [(NodeIdClaim("host:lake-2.lake.svc", "lake-2.lake.svc"), 3, None)]
    assert list(tmp_path.iterdir()) == []  # an ordinal needs no state file
    assert [r.getMessage() for r in caplog.records] == [
        "node id 3 (node-id auto: host name Lake-2.lake.svc has ordinal 2: id = ordinal + 1; claimed for "
        "host:lake-2.lake.svc)"]
    again = choose_node_id(settings(), "Lake-2.lake.svc")
    assert again.node_id == 3 and "since an earlier start" in again.reason


def test_without_ordinal_or_state_dir_the_host_name_is_the_identity(zk: FakeZooKeeper) -> None:
    first = choose_node_id(settings(), "vm")
    assert (first.node_id, first.scheme, first.identity) == (1, NodeIdScheme.ALLOCATED, "host:vm")
    assert first.reason == "host name vm has no ordinal; the smallest free id, claimed for host:vm"
    assert choose_node_id(settings(), "other").node_id == 2
    assert choose_node_id(settings(), "vm").node_id == 1  # a restart keeps its id
    assert [c[1:] for c in zk.calls] == [(None, None)] * 3


def test_a_state_dir_identifies_the_node_and_records_its_id(zk: FakeZooKeeper, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    first = choose_node_id(settings(state_dir=str(a)), "vm")
    second = choose_node_id(settings(state_dir=str(b)), "vm")  # one host, two nodes: two identities
    assert (first.node_id, second.node_id) == (1, 2) and first.identity != second.identity
    record = json.loads((a / "node-id-p.json").read_text())
    assert record == {"identity": first.identity, "pipeline": "p", "node_id": 1}
    assert first.identity.startswith("dir:") and str(a / "node-id-p.json") in first.reason
    # restarted on another host: the file keeps the id
    again = choose_node_id(settings(state_dir=str(a)), "new-host")
    assert again.node_id == 1 and zk.calls[-1] == (NodeIdClaim(first.identity, "new-host"), None, 1)
    # ZooKeeper forgot (its subtree deleted): the recorded id is claimed again
    zk.ids.clear()
    reclaimed = choose_node_id(settings(state_dir=str(b)), "vm")
    assert reclaimed.node_id == 2 and "the id the state file recorded, claimed again" in reclaimed.reason


def test_the_identity_is_written_before_the_claim(zk: FakeZooKeeper, tmp_path: Path) -> None:
    zk.fail = CoordinatorUnavailable("ZooKeeper z:2181 unreachable in 10s")
    with pytest.raises(UsageError) as error:
        choose_node_id(settings(state_dir=str(tmp_path)), "vm")
    assert str(error.value) == ("--node-id auto: cannot claim a node id in ZooKeeper at z:2181: "
                                "ZooKeeper z:2181 unreachable in 10s")
    written = json.loads((tmp_path / "node-id-p.json").read_text())
    assert written["node_id"] is None
    zk.fail = None
    assert choose_node_id(settings(state_dir=str(tmp_path)), "vm").identity == written["identity"]


@pytest.mark.parametrize("failure, message", [
    (NodeIdTaken("node id 3 is held by a live node of another identity (host:other-2 on host other-2): stop that node"),
     "--node-id auto: host name lake-2 has ordinal 2: id = ordinal + 1, but node id 3 is held by a live node of "
     "another identity (host:other-2 on host other-2): stop that node; or give this node an explicit --node-id"),
    (AccessDeniedError("ZooKeeper denied access to /laminar/p: credentials missing or wrong"),
     "ZooKeeper denied access to /laminar/p: credentials missing or wrong (zk-auth)"),
    (ConnectionLoss(), "--node-id auto: cannot claim a node id in ZooKeeper at z:2181: "),
])
def test_every_failure_is_one_line(zk: FakeZooKeeper, failure: BaseException, message: str) -> None:
    zk.fail = failure
    with pytest.raises(UsageError) as error:
        choose_node_id(settings(), "lake-2")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_bad_state_file_is_one_line(zk: FakeZooKeeper, tmp_path: Path) -> None:
    path = tmp_path / "node-id-p.json"
    path.write_text("{")
    with pytest.raises(ConfigurationError, match="delete the file"):
        choose_node_id(settings(state_dir=str(tmp_path)), "vm")
    path.write_text(json.dumps({"identity": "dir:" + "0" * 32, "pipeline": "other", "node_id": 1}))
    with pytest.raises(UsageError, match="belongs to pipeline 'other', not 'p'"):
        choose_node_id(settings(state_dir=str(tmp_path)), "vm")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot read the state file .*: Not a directory"):
        choose_node_id(settings(state_dir=str(blocker / "dir")), "vm")
    assert zk.calls == []
