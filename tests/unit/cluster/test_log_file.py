"""``--log-file`` under logrotate: the file is opened again once it was moved away, so the lines after
a rotation go to the new file, not the rotated one."""
from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.cluster.logs import configure_logging


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_rotated_log_file_is_opened_again(tmp_path: Path, restored_logging: None) -> None:
    log = tmp_path / "node.log"
    configure_logging("info", "text", str(log))
    logger = logging.getLogger("cluster.test_log_file")
    logger.info("before the rotation")
    log.rename(tmp_path / "node.log.1")  # what logrotate does (then it signals nobody)
    logger.info("after the rotation")
    assert "before the rotation" in (tmp_path / "node.log.1").read_text()
    assert "after the rotation" not in (tmp_path / "node.log.1").read_text()
    assert "after the rotation" in log.read_text()


def test_lines_go_to_the_stderr_of_the_moment_not_the_one_at_set_up(
        restored_logging: None, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info")
    first.close()  # a capture that ended (pytest's, an embedding host's)
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("cluster.test_log_file").info("after the swap")
    assert second.getvalue().endswith("INFO cluster.test_log_file: after the swap\n")
    assert "Logging error" not in second.getvalue()
