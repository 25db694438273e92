"""What every `laminar-kafka` command shares: the parser class, the common flags, logging, the Kafka client."""
from __future__ import annotations

import argparse
import os
from typing import NoReturn

from laminar_kafka.cluster.config import kafka_client_from
from laminar_kafka.cluster.errors import UsageError
from laminar_kafka.cluster.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from laminar_kafka.errors import ConfigurationError
from laminar_kafka.kafka_source.clients import KafkaClientConfig

PROG = "laminar-kafka"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def add_common(parser: argparse.ArgumentParser, top: bool = False) -> None:
    # Subcommands must not reset an option given before the command name.
    parser.add_argument("--debug", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="verbose logs (--log-level debug) and stack traces on errors")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=None if top else argparse.SUPPRESS,
                        help="log level (default info) [env LAMINAR_LOG_LEVEL]")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None if top else argparse.SUPPRESS,
                        help="text (default) or json, one object per line for log shippers [env LAMINAR_LOG_FORMAT]")


def add_kafka_client(parser: argparse.ArgumentParser) -> None:
    """The Kafka client flags of a command that is not a node: the bootstrap servers and a config
    file whose [kafka] table (and LAMINAR_KAFKA__*) reaches every client (security...)."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (or 'bootstrap' in --config, LAMINAR_BOOTSTRAP)")
    parser.add_argument("--config", metavar="FILE",
                        help="TOML file: its 'bootstrap' and [kafka] table of client properties are used "
                             "(the same file `run` takes; LAMINAR_KAFKA__<KEY> too)")


def configure_command_logging(args: argparse.Namespace, log_file: str | None = None, default_level: str = "info") -> None:
    """Logging of a command from --debug, --log-level, --log-format and their environment variables."""
    level = "debug" if args.debug else (args.log_level or os.environ.get("LAMINAR_LOG_LEVEL") or default_level)
    log_format = args.log_format or os.environ.get("LAMINAR_LOG_FORMAT") or "text"
    try:
        configure_logging(level.lower(), log_format.lower(), log_file)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def kafka_client_of(args: argparse.Namespace) -> KafkaClientConfig:
    try:
        return kafka_client_from(args.config, os.environ, args.bootstrap)
    except ConfigurationError as exc:
        raise UsageError(str(exc), cause=exc) from exc
