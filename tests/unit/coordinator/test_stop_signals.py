"""The one run-until-stopped loop: Ctrl-C and SIGTERM set a stop event while a block runs, the
previous handlers come back after it; a foreground server's loop also ends when it stops living."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from laminar_kafka.coordinator.stop_signals import STOP_SIGNALS, run_until_stopped, stop_on_signals

pytestmark = pytest.mark.timeout(30)


def test_a_stop_signal_sets_the_event_and_the_previous_handlers_come_back() -> None:
    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        with stop_on_signals() as stop:
            os.kill(os.getpid(), signum)
            assert stop.wait(5)
        assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_off_the_main_thread_nothing_is_installed() -> None:
    given = threading.Event()
    seen: list[threading.Event] = []

    def block() -> None:
        with stop_on_signals(given) as stop:
            seen.append(stop)

    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    worker = threading.Thread(target=block)
    worker.start()
    worker.join()
    assert seen == [given] and {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_the_loop_ends_when_what_it_runs_stops_living() -> None:
    answers = iter([True, True, False])
    run_until_stopped(lambda: next(answers), poll_s=0.01)


@pytest.mark.parametrize("signum", STOP_SIGNALS)
def test_a_foreground_process_stops_cleanly_on_ctrl_c_or_sigterm(signum: signal.Signals) -> None:
    code = ("from laminar_kafka.coordinator.stop_signals import run_until_stopped\n"
            "asked = []\n"
            "def alive():\n"  # first asked once the handlers are in place
            "    if not asked:\n"
            "        asked.append(True)\n"
            "        print('ready', flush=True)\n"
            "    return True\n"
            "run_until_stopped(alive, poll_s=0.05)\nprint('stopped', flush=True)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        process.send_signal(signum)
        out, _ = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0 and out == "stopped\n"
