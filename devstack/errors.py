"""The `devstack` package's exception tree: one root, `DevStackError`.

Its own root beneath the distribution's `LaminarError` (devstack never imports the runtime): the
command line (`laminar-kafka dev|demo|chaos`) reports a dev-tooling failure as any other runtime
failure: one line, exit 1.
"""
from __future__ import annotations

from laminar_kafka.errors import LaminarError


class DevStackError(LaminarError):
    """Root of every error raised by the `devstack` package (`cause` keeps the underlying one)."""


class ToolMissingError(DevStackError):
    """A required external tool (Java, Maven) is not installed; the message says what to install."""


class ArtifactError(DevStackError):
    """The Kafka or ZooKeeper JVM artifacts could not be resolved from Maven Central."""


class ServerStartError(DevStackError):
    """A server process did not become healthy; the message quotes the tail of its log."""


class DevStackStateError(DevStackError):
    """The dev stack's state file is missing, unreadable or describes processes that are gone."""


class WaitTimeout(DevStackError, TimeoutError):
    """`waiting.wait_until` gave up: the awaited condition did not hold within its timeout."""
