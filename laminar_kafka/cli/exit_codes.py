"""The exit codes of `laminar-kafka`, and the one table that maps an error to its code.

Every subcommand returns its own outcome (0, or a command's documented non-zero result such as
`verify`'s 1 for a lake that is not exact, `status`'s 1 degraded and 3 unreachable); an error that
escapes a subcommand is turned into a code here, by :func:`exit_code`, which :func:`~laminar_kafka.cli.main.main`
applies to every subcommand:

====  ==========================================================================================
code  meaning
====  ==========================================================================================
0     success
1     a runtime failure: any other error of the distribution (:class:`~laminar_kafka.errors.LaminarError`:
      the node stopped, the lake or Kafka cannot be read, the dev tooling failed)
2     bad input from a person: a usage error (:class:`~laminar_kafka.cluster.errors.UsageError`: a wrong
      flag, an unreachable server, an unwritable path) or a bad setting
      (:class:`~laminar_kafka.errors.ConfigurationError`, whichever layer found it)
3     `status`: the pipeline cannot be read (returned by the command, never raised)
130   interrupted (Ctrl-C)
====  ==========================================================================================

Anything else (a bug) is not ours to summarise: :func:`exit_code` returns None and the caller
re-raises it, traceback and all.
"""
from __future__ import annotations

from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.errors import ConfigurationError, LaminarError

__all__ = ["EXIT_CODES", "FAILURE", "INTERRUPTED", "OK", "UNREACHABLE", "USAGE", "exit_code"]

OK = 0
FAILURE = 1
USAGE = 2
UNREACHABLE = 3
INTERRUPTED = 130

#: error class -> exit code; the first class the error is an instance of wins (most specific first)
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (UsageError, USAGE),
    (ConfigurationError, USAGE),
    (LaminarError, FAILURE),
    (KeyboardInterrupt, INTERRUPTED),
)


def exit_code(error: BaseException) -> int | None:
    """The exit code of ``error`` escaping a subcommand (see the module's table); None when it is
    not one of ours (the caller re-raises it). Pure."""
    for kind, code in EXIT_CODES:
        if isinstance(error, kind):
            return code
    return None
