"""Progress bars appear only on a terminal: nothing at all is written to a pipe or a CI log."""
from __future__ import annotations

import io

import pytest

from laminar_kafka.cluster.ops.progress import progress_enabled, terminal_progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_and_no_output_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with terminal_progress("reading t", stream=stream) as report:
        assert report is None
    assert stream.getvalue() == "" and not progress_enabled(stream)


def test_the_environment_switch_disables_the_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAMINAR_NO_PROGRESS", "1")
    assert not progress_enabled(FakeTerminal())


def test_a_terminal_gets_a_bar_that_reports_done_of_total() -> None:
    pytest.importorskip("rich")
    stream = FakeTerminal()
    assert progress_enabled(stream)
    with terminal_progress("reading orders", stream=stream, force=True) as report:
        assert report is not None
        report(250, 1000)
        report(5000, 1000)  # clamped: never more than the total
    text = stream.getvalue()
    assert "reading orders" in text and "1000/1000" in text
