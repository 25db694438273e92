"""One embedded node per state directory: a second process (or coordinator) is refused at start."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_kafka.coordinator.config import CoordinatorConfig
from laminar_kafka.coordinator.local.coordinator import LocalCoordinator
from laminar_kafka.coordinator.local.state_lock import StateDirectoryInUse, StateDirectoryLock
from laminar_kafka.errors import ConfigurationError

HOLD = """
import sys, time
from pathlib import Path
from laminar_kafka.coordinator.local.state_lock import StateDirectoryLock
StateDirectoryLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_lock_is_refused_naming_the_holder_until_the_first_is_released(tmp_path: Path) -> None:
    first = StateDirectoryLock(tmp_path / "state")
    first.acquire()
    with pytest.raises(StateDirectoryInUse, match=rf"state directory {tmp_path}/state is in use .*pid {os.getpid()} on "):
        StateDirectoryLock(tmp_path / "state").acquire()
    assert issubclass(StateDirectoryInUse, ConfigurationError)
    first.release()
    second = StateDirectoryLock(tmp_path / "state")
    second.acquire()
    assert second.held and not first.held
    second.release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[4])
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StateDirectoryInUse, match=f"pid {holder.pid} "):
            StateDirectoryLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    lock = StateDirectoryLock(tmp_path)
    lock.acquire()  # the kernel dropped the dead process's lock
    lock.release()


def test_a_second_local_coordinator_on_one_directory_cannot_start_until_the_first_stops(tmp_path: Path) -> None:
    config = CoordinatorConfig(pipeline="p", checkpoint_interval=60)
    first = LocalCoordinator(config, tmp_path)
    first.start(timeout=10)
    second = LocalCoordinator(config, tmp_path)
    try:
        with pytest.raises(StateDirectoryInUse, match="run several nodes with --zk"):
            second.start(timeout=10)
    finally:
        second.stop()
        first.stop()
    third = LocalCoordinator(config, tmp_path)
    third.start(timeout=10)
    third.stop()


def test_a_state_directory_holds_one_pipeline(tmp_path: Path) -> None:
    """Two pipelines on one output, each with the default state-dir: the second is refused by name
    (it used to fail later on a checkpoint naming the other pipeline's topic)."""
    orders = LocalCoordinator(CoordinatorConfig(pipeline="orders", checkpoint_interval=60), tmp_path)
    orders.start(timeout=10)
    orders.stop()
    payments = LocalCoordinator(CoordinatorConfig(pipeline="payments", checkpoint_interval=60), tmp_path)
    try:
        with pytest.raises(ConfigurationError, match=f"state directory {tmp_path} holds pipeline 'orders', not 'payments'"):
            payments.start(timeout=10)
    finally:
        payments.stop()
    again = LocalCoordinator(CoordinatorConfig(pipeline="orders", checkpoint_interval=60), tmp_path)
    again.start(timeout=10)
    again.stop()


def test_a_state_directory_that_cannot_be_locked_is_one_configuration_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    readonly.chmod(0o500)
    if os.access(readonly, os.W_OK):  # root ignores the mode: use a file where the directory should be
        (tmp_path / "file").write_text("")
        target = tmp_path / "file" / "state"
    else:
        target = readonly / "state"
    with pytest.raises(ConfigurationError, match="cannot open the state directory's lock"):
        StateDirectoryLock(target).acquire()

    def no_locks(_fd: int, _op: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr("laminar_kafka.coordinator.local.state_lock.fcntl.flock", no_locks)
    with pytest.raises(ConfigurationError, match=r"cannot lock the state directory .*No locks available.*use a local state-dir"):
        StateDirectoryLock(tmp_path / "nfs").acquire()
