"""The root of every exception the distribution raises on purpose, and its one configuration error.

The lowest floor of the house: every package may import this module and it imports nothing of ours.
Beneath :class:`LaminarError`, each package has its own root (``CoordinatorError``,
``ConnectorError``, ``ClusterError``, ``DevStackError``, the testing plugin's ``ServersUnavailable``)
so a caller catches one package, or the whole distribution, with one clause.

:class:`ConfigurationError` is the one error for a bad setting, whichever layer found it (the
coordinator, a connector, the node runtime, the lake); a layer that must also be caught as its own
package's error subclasses both (``AccessDeniedError(CoordinatorError, ConfigurationError)``).
The command line maps these classes to exit codes in one place (``laminar_kafka.cli.exit_codes``).
"""
from __future__ import annotations

from typing import Any

__all__ = ["ConfigurationError", "LaminarError"]


class LaminarError(Exception):
    """Root of every error the distribution raises on purpose.

    ``message`` is the one-line text (also ``str(error)``). ``cause`` is the underlying error when
    there is one: an exception, or a client library's error object that is not one (a
    ``confluent_kafka.KafkaError``); ``None`` otherwise. Passing it does not replace
    ``raise ... from cause``; it makes the cause available to code that only receives the error.
    """

    def __init__(self, message: str, *, cause: Any = None) -> None:
        super().__init__(message)
        self.message: str = message
        self.cause: Any = cause


class ConfigurationError(LaminarError):
    """A setting, a startup request or an argument of a call is missing, malformed, unknown or
    inconsistent with what the pipeline or the lake already holds; the message names it. Never
    retried: the same input fails the same way (the command line exits 2)."""
