"""``--log-file`` under logrotate: the file is opened again once it was moved away, so the lines after
a rotation go to the new file, not the rotated one."""
from __future__ import annotations

import logging
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
