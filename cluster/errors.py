"""The `cluster` package's exception tree: one root, `ClusterError`, beneath the distribution's
`LaminarError`. A node setting that is missing, malformed or unknown is the distribution's one
`laminar_kafka.errors.ConfigurationError` (not a ClusterError)."""
from __future__ import annotations

from laminar_kafka.errors import LaminarError


class ClusterError(LaminarError):
    """Root of every error raised by the `cluster` package.

    `cause` keeps the underlying exception (a kazoo or Kafka error, an OSError) when there is one.
    """


class UsageError(ClusterError):
    """Bad input from a person: a wrong flag, an unreachable server, an unwritable path (CLI exit 2)."""


class SinkError(ClusterError):
    """The Parquet sink could not stage, publish or recover output files."""


class VerifyError(ClusterError):
    """The audit could not read the output or the topic (not: the audit found a problem)."""


class RuntimeFailure(ClusterError):
    """The node runtime hit a condition it cannot continue from (a source or coordinator failure)."""
