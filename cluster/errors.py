"""The `cluster` package's exception tree: one root, `ClusterError`."""
from __future__ import annotations


class ClusterError(Exception):
    """Root of every error raised by the `cluster` package.

    `cause` keeps the underlying exception (a kazoo or Kafka error, an OSError) when there is one.
    """

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class UsageError(ClusterError):
    """Bad input from a person: a wrong flag, an unreachable server, an unwritable path (CLI exit 2)."""


class ConfigError(UsageError):
    """A node setting is missing, malformed or unknown (the message names the setting)."""


class SinkError(ClusterError):
    """The Parquet sink could not stage, publish or recover output files."""


class VerifyError(ClusterError):
    """The audit could not read the output or the topic (not: the audit found a problem)."""


class RuntimeFailure(ClusterError):
    """The node runtime hit a condition it cannot continue from (a source or coordinator failure)."""
