"""The `rest_catalog` session fixture: a real Apache Iceberg REST catalog (`laminar_kafka.devstack.jvm.rest_catalog`:
Iceberg's own REST catalog server, from Maven Central) on a free port, for the session.

It yields the catalog URI (``http://127.0.0.1:<port>``); its default warehouse is a local directory,
and tables created with a location (the nodes create theirs under the output) live there. Tests keep
apart by unique namespaces or table names. ``ICEBERG_REST_CATALOG_URI`` set: that catalog instead.

`rest_catalog_on_s3`: the same server able to write table metadata to the session's SeaweedFS
(`s3_server`), for tables at ``s3://`` locations the lake chooses (SeaweedFS's own catalog only
takes tables in its table bucket).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.devstack.objectstore.seaweedfs import SeaweedServer


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of an Iceberg REST catalog running for the session."""
    external = os.environ.get("ICEBERG_REST_CATALOG_URI")
    if external:
        yield external
        return
    from laminar_kafka.devstack.jvm.rest_catalog import new_rest_catalog

    server = new_rest_catalog(Path(tmp_path_factory.mktemp("rest-catalog")))
    server.start(timeout=120.0)  # about 2 s; the first run also resolves the jars (about 20 s cold)
    try:
        yield server.uri
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rest_catalog_on_s3(s3_server: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of an Iceberg REST catalog that writes ``s3://`` table metadata to SeaweedFS."""
    from laminar_kafka.devstack.jvm.rest_catalog import new_rest_catalog

    server = new_rest_catalog(Path(tmp_path_factory.mktemp("rest-catalog-s3")), s3=s3_server.access)
    server.start(timeout=120.0)  # the first run also resolves the AWS SDK bundle (about 65 MB)
    try:
        yield server.uri
    finally:
        server.stop()
