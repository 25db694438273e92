"""ZooKeeperCoordinator, pinned start: the initial manifest and the topic ids are create-once, the
initial manifest is the latest until an epoch commits and the base of the first manifest, and it is
never garbage-collected."""
from __future__ import annotations

import threading
from typing import Callable

import pytest

from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.base import EpochCommitted, EpochOpened, Manifest, initial_manifest
from laminar_kafka.coordinator.engine.model import epoch_name
from laminar_kafka.coordinator.errors import CoordinatorError, FencedError
from laminar_kafka.coordinator.layout import parse_header
from laminar_kafka.errors import ConfigurationError
from tests.conftest import ZooKeeperHandle
from tests.integration.coordinator.helpers import config, coordinators, make_chroot, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]



def test_the_initial_manifest_is_create_once_and_the_base_of_the_first_manifest(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=0.1, manifests_to_keep=2)
    keys = [f"t:{p}" for p in range(2 * cfg.vnode_count)]
    with coordinators(cfg, [1, 2], auto=False) as (coords, nodes):
        assert coords[0].latest_manifest() is None
        with pytest.raises(CoordinatorError):
            coords[0].manifest(0)
        candidates = [
            initial_manifest({"s": {k: 5 for k in keys}, "gone": {"x:0": 7}}),
            initial_manifest({"s": {k: 9 for k in keys}, "gone": {"x:0": 8}}),
        ]
        results: list[Manifest] = []
        barrier = threading.Barrier(2)

        def pin(index: int) -> None:
            barrier.wait()
            results.append(coords[index].pin_start(candidates[index]))

        threads = [threading.Thread(target=pin, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert len(results) == 2 and results[0] == results[1] and results[0] in candidates  # one winner
        pinned = results[0]
        for c in coords:
            assert c.pin_start(initial_manifest({"s": {}})) == pinned
            assert c.latest_manifest() == pinned and c.manifest(0) == pinned
        with pytest.raises(CoordinatorError):
            coords[0].pin_start(Manifest(1, 1, {}))  # not an initial manifest

        for node in nodes:  # from now on the nodes ack (cursors 10 * epoch, above anything pinned)
            node.auto = True
            opened = [e for e in node.events if isinstance(e, EpochOpened)]
            if opened:
                try:
                    node.ack(opened[-1])
                except FencedError:
                    pass  # not open any more
        first = nodes[0].wait_for(EpochCommitted)
        assert first.manifest.epoch == 1
        assert first.manifest.cursors["gone"] == pinned.cursors["gone"]  # no ack names it: from the pin
        assert set(first.manifest.cursors["s"]) == set(keys)
        later = nodes[0].wait_for(EpochCommitted, lambda e: e.manifest.epoch >= 8, timeout=30)
        assert later.manifest.cursors["gone"] == pinned.cursors["gone"]
        wait_until(lambda: min(int(n) for n in coords[0].client.get_children(coords[0].store.path(layout.CHECKPOINTS)) if int(n)) > 1)
        assert epoch_name(0) in coords[0].client.get_children(coords[0].store.path(layout.CHECKPOINTS))  # never collected
        coords[0].store.forget_manifests()
        assert coords[0].manifest(0) == pinned


def test_a_large_initial_manifest_is_chunked_and_topic_ids_are_create_once(
    zookeeper: ZooKeeperHandle, unique: Callable[[str], str]
) -> None:
    hosts = make_chroot(zookeeper.hosts, unique("zk"))
    cfg = config(hosts, checkpoint_interval=60.0)
    with coordinators(cfg, [1, 2], auto=False) as (coords, _nodes):
        big = initial_manifest({"s": {f"topic-with-a-long-name:{p}": p for p in range(40_000)}})
        assert len(big.to_json()) > 1_000_000
        assert coords[0].pin_start(big) == big
        path = coords[0].store.path(layout.checkpoint_path(0))
        assert parse_header(coords[0].client.get(path)[0]) is not None
        assert len(coords[0].client.get_children(path)) >= 2
        assert coords[1].pin_start(initial_manifest({"s": {}})) == big
        coords[1].store.forget_manifests()
        assert coords[1].latest_manifest() == big

        assert coords[0].pin_topic_ids({"orders": "id-a", "payments": "id-b"}) == {"orders": "id-a", "payments": "id-b"}
        assert coords[1].pin_topic_ids({"orders": "id-c", "new.topic_1": "id-d"}) == {
            "orders": "id-a", "new.topic_1": "id-d"}  # the existing record wins
        assert coords[0].pin_topic_ids({}) == {}
        assert coords[0].client.get(coords[0].store.path(layout.topic_path("orders")))[0] == b"id-a"
        for bad in ({"a/b": "x"}, {"..": "x"}, {"ok": ""}):
            with pytest.raises(ConfigurationError):
                coords[0].pin_topic_ids(bad)
