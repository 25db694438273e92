"""The `rest_catalog` session fixture: a real Apache Iceberg REST catalog (`laminar_kafka.devstack.jvm.rest_catalog`:
Iceberg's own REST catalog server, from Maven Central) on a free port, for the session.

It yields the catalog URI (``http://127.0.0.1:<port>``); its default warehouse is a local directory,
and tables created with a location (the nodes create theirs under the output) live there. Tests keep
apart by unique namespaces or table names. ``ICEBERG_REST_CATALOG_URI`` set: that catalog instead.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
