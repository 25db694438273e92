"""Session fixtures for a real object store on loopback.

- `s3_server`: SeaweedFS (`laminar_kafka.devstack.objectstore.seaweedfs`): an S3 endpoint with the
  bucket `TEST_BUCKET` and an Iceberg REST catalog whose table bucket is `TEST_TABLE_BUCKET`. Every
  S3 test runs on it.
- `moto_s3_server`: moto's in-memory mock (`laminar_kafka.devstack.objectstore.moto`), for a fault
  SeaweedFS cannot give (a store that forgets every object at once, any credentials accepted); no
  test needs one today.

While a session fixture runs, the process environment holds the server's ``AWS_*`` variables
(endpoint, credentials, region), so ``s3://bucket/prefix`` resolves to it in the test process and in
every child process (nodes inherit it); tests use unique buckets or prefixes. The server is stopped,
and the environment restored, at session end. Skipped (one line) when the server's package is missing.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from laminar_kafka.devstack.errors import ToolMissingError
from laminar_kafka.devstack.objectstore.moto import MotoServer, start_moto_server
from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer, start_seaweed_server, weed_binary

#: created at start; tests share it and keep apart by a unique prefix
TEST_BUCKET = "laminar-test"
#: the Iceberg catalog's table bucket (its ``warehouse``); tests keep apart by unique namespaces
TEST_TABLE_BUCKET = "laminar-tables"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """SeaweedFS for the session, with the bucket `TEST_BUCKET` and the table bucket
    `TEST_TABLE_BUCKET`, its environment exported."""
    try:
        weed_binary()
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    server = start_seaweed_server(Path(tmp_path_factory.mktemp("seaweedfs")), buckets=[TEST_BUCKET],
                                  table_bucket=TEST_TABLE_BUCKET)
    with _exported(server.env()):
        try:
            yield server
        finally:
            _release_leaked_s3_streams()
            server.stop()


@pytest.fixture(scope="session")
def moto_s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A moto S3 server for the session, with the bucket `TEST_BUCKET`, its environment exported
    (not together with `s3_server`: both export ``AWS_*``)."""
    if importlib.util.find_spec("moto") is None:
        pytest.skip("this test needs moto: pip install 'moto[server]'")
    server = start_moto_server(Path(tmp_path_factory.mktemp("moto-server")), buckets=[TEST_BUCKET])
    with _exported(server.env()):
        try:
            yield server
        finally:
            _release_leaked_s3_streams()
            server.stop()


@contextlib.contextmanager
def _exported(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` while the block runs; the previous values restored after."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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
