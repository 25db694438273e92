"""The `secure_kafka` fixture: a real broker with SASL_SSL (SCRAM-SHA-512) and mTLS listeners.

One local Kafka (a JVM process, `laminar_kafka.devstack.stack.DevStack` with `secure=True`) per session, whatever
the backend of tests/conftest.py: its TLS material and SCRAM user are generated for this run in a
pytest temporary directory (`<stack>/security`), with `client.toml` and `client-mtls.toml` beside.
The broker keeps a PLAINTEXT listener for its inter-broker traffic and health probe only; these
tests reach it through the secured listeners.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.devstack.stack import DevStack


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """A started secure single-broker stack (no ZooKeeper); stopped at the end of the session."""
    stack = DevStack.launch(base_dir=Path(tmp_path_factory.mktemp("secure-kafka")), kafka_brokers=1,
                            zookeeper_servers=0, secure=True)
    try:
        yield stack
    finally:
        stack.stop()
