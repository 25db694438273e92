"""`laminar-kafka status` reads a pipeline through the coordinator's layout: under the configured
ZooKeeper root, and manifests through the checked chunk codec."""
from __future__ import annotations

from typing import Callable

import pytest
from kazoo.client import KazooClient

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.ops.status import read_zookeeper
from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import EpochCommitted
from laminar_kafka.coordinator.state import ControlState
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import config, coordinators, make_chroot

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_status_honours_the_configured_root_and_rejects_a_truncated_manifest(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, root="/custom/pipelines")
    with coordinators(cfg, [1]) as (coords, nodes):
        committed = nodes[0].wait_for(EpochCommitted).manifest
        members, leader, snapshot, manifest, _ = read_zookeeper(hosts, cfg.pipeline, 10.0, cfg.root)
        assert [m.node_id for m in members] == [1] and leader == 1
        assert snapshot is not None and snapshot.nodes() == {1}
        assert manifest is not None and manifest.epoch >= committed.epoch
        with pytest.raises(UsageError, match="does not exist"):
            read_zookeeper(hosts, cfg.pipeline, 10.0, "/laminar")  # the default root holds no pipeline
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    try:
        base = layout.pipeline_path(cfg)
        last = ControlState.from_json(client.get(f"{base}/{layout.ASSIGNMENT}")[0]).last_epoch
        header = layout.ChunkHeader(chunks=3, size=10, xxh3=1).to_json()  # its chunks were never written
        client.set(f"{base}/{layout.checkpoint_path(last)}", header)
    finally:
        client.stop()
        client.close()
    with pytest.raises(UsageError, match="3 of 3 chunks missing"):
        read_zookeeper(hosts, cfg.pipeline, 10.0, cfg.root)
