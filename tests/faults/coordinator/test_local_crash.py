"""LocalCoordinator: a process killed (SIGKILL) between the temporary write and the rename of a
manifest leaves the last manifest intact, and a restart recovers from it."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from laminar_kafka.coordinator.base import CoordinatorConfig, Manifest
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator

pytestmark = [pytest.mark.faults, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent("""
    import os, signal, sys, threading
    from pathlib import Path
    sys.path.insert(0, {root!r})
    import laminar_kafka.coordinator.local.coordinator as local
    from laminar_kafka.coordinator.base import CoordinatorConfig, EpochAck, EpochOpened
    config = CoordinatorConfig(pipeline="crash", checkpoint_interval=0.05, vnode_count=4)
    directory = Path({directory!r})

    def crash(path):
        if path.name.startswith("manifest-") and int(path.name[9:29]) > {crash_epoch}:
            os.kill(os.getpid(), signal.SIGKILL)   # after the temp file is durable, before the rename

    c = local.LocalCoordinator(config, directory, before_rename=crash)
    def on(event):
        if isinstance(event, EpochOpened):
            def ack():
                cursors = {{"s": {{f"t:{{v}}": 100 * event.epoch for v in range(4)}}}}
                c.ack_epoch(EpochAck(1, c.boot_id, event.epoch, event.assignment_version, cursors,
                                     (f"out-{{event.epoch}}",)))
            threading.Thread(target=ack).start()
    c.subscribe(on)
    c.start(timeout=10)
    threading.Event().wait(30)
    sys.exit(3)  # not reached: the crash hook kills the process
""")


def test_crash_between_temp_write_and_rename_keeps_the_last_manifest(tmp_path: Path) -> None:
    crash_epoch = 3
    script = CHILD.format(root=str(ROOT), directory=str(tmp_path), crash_epoch=crash_epoch)
    result = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert result.returncode == -9, result.stderr.decode()[-2000:]

    leftovers = sorted(p.name for p in tmp_path.glob("*.tmp"))
    assert leftovers == [f"manifest-{crash_epoch + 1:020d}.json.tmp"], leftovers
    manifests = sorted(p.name for p in tmp_path.glob("manifest-*.json"))
    assert manifests[-1] == f"manifest-{crash_epoch:020d}.json"
    last = Manifest.from_json((tmp_path / manifests[-1]).read_bytes())
    assert last.epoch == crash_epoch and last.cursors["s"]["t:0"] == 100 * crash_epoch

    config = CoordinatorConfig(pipeline="crash", checkpoint_interval=60, vnode_count=4)
    restarted = LocalCoordinator(config, tmp_path)
    restarted.start(timeout=10)
    try:
        assert restarted.latest_manifest() == last
        assert not list(tmp_path.glob("*.tmp"))  # debris removed on start
        assert restarted.assignment().nodes() == {1}
    finally:
        restarted.stop()
