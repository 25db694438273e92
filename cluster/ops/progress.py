"""Progress bars for long CLI steps (``verify`` reading a topic and an output, ``dev up`` starting
servers), shown only when stderr is a terminal.

:func:`terminal_progress` is a context manager yielding a ``report(done, total)`` callback (the shape
:func:`laminar_kafka.cluster.ops.verify.read_topic` takes as ``progress=``) or ``None`` when no bar is shown: stderr is
not a terminal (CI logs, pipes: nothing at all is printed), ``LAMINAR_NO_PROGRESS`` is set, or the
``rich`` library is missing. Until the first report the bar is an indeterminate spinner with the
elapsed time, so a step without a known size (``dev up``) can use it as is::

    with terminal_progress("starting Kafka and ZooKeeper"):
        stack = DevStack.launch(...)

The bar goes to stderr and is removed when the step ends, so stdout (tables, JSON) is unchanged.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["ProgressReport", "progress_enabled", "terminal_progress"]

#: ``report(done, total)``: ``done`` units of ``total`` finished (records, files...)
ProgressReport = Callable[[int, int], None]

#: set (to anything) to never show a bar
DISABLE_ENV = "LAMINAR_NO_PROGRESS"


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Whether a bar would be shown on ``stream`` (default stderr): a terminal, not disabled, rich present."""
    stream = sys.stderr if stream is None else stream
    if os.environ.get(DISABLE_ENV) or not getattr(stream, "isatty", lambda: False)():
        return False
    return importlib.util.find_spec("rich") is not None


@contextlib.contextmanager
def terminal_progress(description: str, *, stream: TextIO | None = None,
                      force: bool = False) -> Iterator[ProgressReport | None]:
    """A transient bar named ``description`` on ``stream`` (default stderr) while the block runs;
    yields its ``report(done, total)`` callback, or None when no bar is shown (see the module doc).
    ``force``: show it even when ``stream`` is not a terminal (tests)."""
    stream = sys.stderr if stream is None else stream
    if not force and not progress_enabled(stream):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=stream, force_terminal=True if force else None)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def report(done: int, total: int) -> None:
            bar.update(task, completed=max(0, min(done, total)), total=max(total, 0))

        yield report
