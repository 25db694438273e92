"""Run the ``laminar-kafka`` command line with every compaction it builds killed (SIGKILL) at one step.

    python tests/compaction_fault.py after-write compact --output ... --topic ...

The step is :data:`~laminar_kafka.cluster.lake.parquet.compaction.AFTER_WRITE` or
:data:`~laminar_kafka.cluster.lake.parquet.compaction.AFTER_EXCHANGE`. The product has no fault
switch: this script gives each :class:`TreeCompaction` an ``after_step`` that kills the process
when the pass reaches that step, so crash tests can prove the tree is exact after such a death.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

from laminar_kafka.cluster.lake.parquet import compaction


def install(step: str) -> None:
    """Replace the compaction the command line builds by one killed at ``step``."""
    if step not in (compaction.AFTER_WRITE, compaction.AFTER_EXCHANGE):
        raise SystemExit(f"unknown step {step!r}: expected {compaction.AFTER_WRITE} or {compaction.AFTER_EXCHANGE}")

    def after_step(reached: str) -> None:
        if reached == step:
            os.kill(os.getpid(), signal.SIGKILL)

    class KilledCompaction(compaction.TreeCompaction):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, after_step=after_step, **kwargs)

    # the command line imports TreeCompaction from its module when it compacts
    compaction.TreeCompaction = KilledCompaction  # type: ignore[misc]  # replacing the class is the point here


if __name__ == "__main__":
    install(sys.argv[1])
    from laminar_kafka.cli.main import main

    sys.exit(main(sys.argv[2:]))
