"""A coordinator that cannot answer now says so (CoordinatorUnavailable), distinct from an answer
such as "this epoch is not committed": a caller may treat an absent manifest as gone, never one it
could not read."""
from __future__ import annotations

from pathlib import Path

import pytest

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.errors import CoordinatorError, CoordinatorUnavailable
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator


def test_manifest_reads_that_fail_are_unavailable_not_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    coordinator = LocalCoordinator(CoordinatorConfig(pipeline="p", checkpoint_interval=60), tmp_path)
    with pytest.raises(CoordinatorError) as absent:
        coordinator.manifest(3)
    assert not isinstance(absent.value, CoordinatorUnavailable)

    def unreachable() -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(coordinator._store, "read_register", unreachable)
    for call in (lambda: coordinator.manifest(3), coordinator.latest_manifest):
        with pytest.raises(CoordinatorUnavailable, match="disk went away"):
            call()
