"""Logging of every `laminar-kafka` command: one format, one level, librdkafka and kazoo tamed.

- ``--log-level`` (``LAMINAR_LOG_LEVEL``): debug, info (default), warning, error.
- ``--log-format`` (``LAMINAR_LOG_FORMAT``): ``text`` (default) or ``json``, one JSON object per line
  for log shippers (``ts``, ``level``, ``logger``, ``message``, and ``exc`` with a stack trace).
- librdkafka's own lines arrive through :data:`laminar_kafka.kafka_source.clients.LIBRDKAFKA_LOGGER` (every client
  is built with ``logger=``); a repeating line (a broker that stays unreachable retries every second) is
  logged once per :data:`REPEAT_WINDOW_S`, with the count of the ones dropped.
- While a command checks its inputs (:func:`quiet_clients`), the client libraries say nothing: the
  check itself reports the one line that names the cause.
"""
from __future__ import annotations

import json
import logging
import logging.handlers
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from laminar_kafka.kafka_source.clients import LIBRDKAFKA_LOGGER

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "RepeatFilter", "StderrHandler", "configure_logging", "quiet_clients"]

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error")
LOG_FORMATS: tuple[str, ...] = ("text", "json")
#: a librdkafka line repeating within this window is dropped (and counted)
REPEAT_WINDOW_S = 60.0
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_DIGITS = re.compile(r"\d+")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False)


class RepeatFilter(logging.Filter):
    """Passes the first of a run of similar records (same logger, level and text with the numbers
    masked) per ``window_s``; the next one passed after a window says how many were dropped."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock or time.monotonic
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, _DIGITS.sub("#", record.getMessage())[:160])
        now = self._clock()
        with self._lock:
            first, dropped = self._seen.get(key, (None, 0))
            if first is not None and now - first < self._window_s:
                self._seen[key] = (first, dropped + 1)
                return False
            self._seen[key] = (now, 0)
            if len(self._seen) > 1000:  # forget old texts; a bounded table
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self._window_s}
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} similar line(s) dropped in {self._window_s:.0f}s)"
            record.args = ()
        return True



class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted, not the stream it was at set-up
    (as :data:`logging.lastResort`): a caller that swaps stderr (a test capturing output, an embedding
    host) never leaves this handler writing to a closed file."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr


def configure_logging(level: str = "info", log_format: str = "text", log_file: str | None = None) -> None:
    """Route every logger to stderr (and ``log_file``) in ``log_format`` at ``level``. ``log_file`` is
    opened again when it was moved or deleted (logrotate's default ``create`` mode), so a rotated log
    does not keep every later line."""
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    handlers: list[logging.Handler] = [StderrHandler()]
    if log_file:
        handlers.append(logging.handlers.WatchedFileHandler(log_file))
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=handlers, force=True)
    debug = level == "debug"
    logging.getLogger("kazoo").setLevel(logging.DEBUG if debug else logging.WARNING)
    if not any(isinstance(f, RepeatFilter) for f in LIBRDKAFKA_LOGGER.filters):
        LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())
    LIBRDKAFKA_LOGGER.setLevel(logging.DEBUG if debug else logging.WARNING)


@contextmanager
def quiet_clients(debug: bool = False) -> Iterator[None]:
    """Inside the block, librdkafka and kazoo log nothing (unless ``debug``): the caller reports the
    failure it meets in one line. Levels are restored after."""
    loggers = [LIBRDKAFKA_LOGGER, logging.getLogger("kazoo")]
    saved = [lg.level for lg in loggers]
    if not debug:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, saved, strict=True):
            lg.setLevel(lvl)
