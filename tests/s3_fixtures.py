"""The `s3_server` session fixture: a real S3-compatible server (moto, `laminar_kafka.devstack.s3`) on loopback.

While the session runs, the process environment holds `S3Server.env()` (endpoint, credentials,
region), so ``s3://bucket/prefix`` resolves to this server in the test process and in every child
process (nodes inherit it); tests use unique buckets or prefixes. The server is stopped, and the
environment restored, at session end. Skipped (one line) when moto is not installed.
"""
from __future__ import annotations

import gc
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.devstack.s3 import S3Server, start_s3_server

#: created at start; tests share it and keep apart by a unique prefix
TEST_BUCKET = "laminar-test"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto S3 server for the session, with the bucket `TEST_BUCKET`, its environment exported."""
    if importlib.util.find_spec("moto") is None:
        pytest.skip("the S3 tests need moto: pip install 'moto[server]'")
    server = start_s3_server(Path(tmp_path_factory.mktemp("s3-server")), buckets=[TEST_BUCKET])
    saved = {key: os.environ.get(key) for key in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        _release_leaked_s3_streams()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def _release_leaked_s3_streams() -> None:
    """Destroy S3 output streams a failed test left open, while S3 is still initialised.

    pyarrow 26 finalises S3 at interpreter exit; an S3 output stream destroyed after that (one held by
    the last failure's traceback, ``sys.last_traceback``) blocks the process forever. Destroyed now,
    it completes its upload (under ``_staging/``, which readers skip) and the session exits.
    """
    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        if hasattr(sys, name):
            delattr(sys, name)
    gc.collect()
