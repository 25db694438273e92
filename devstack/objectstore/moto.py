"""moto's S3 server on loopback, kept for the tests that need a fault SeaweedFS cannot give.

The dev object store is SeaweedFS (:mod:`laminar_kafka.devstack.objectstore.seaweedfs`): a real
server that checks signatures, keeps objects on disk and serves an Iceberg REST catalog. moto stays
for what only a mock can do: it keeps everything in memory and checks no signature, so a test can
make the store forget every object at once (``POST /moto-api/reset``: a wiped bucket) and can hand
out any credentials. No test in the suite needs either today (they all run on SeaweedFS); the
fixture ``moto_s3_server`` (``tests/s3_fixtures.py``) keeps the door open. moto comes with the
``test`` extra only.

`start_moto_server` launches ``python -m laminar_kafka.devstack.objectstore.moto --port P --workdir D``
(this module's :func:`main`, which runs ``moto.server`` with its per-request log lines silenced) in
its own session, bound to 127.0.0.1 on a free port, waits until it answers and creates the wanted
buckets. It returns a :class:`MotoServer`; its :attr:`MotoServer.access` is the endpoint, region and
credentials (:class:`~laminar_kafka.devstack.objectstore.access.S3Access`). Stopping the process
discards every object. moto is imported only in the server process.

Run ``python -m laminar_kafka.devstack.objectstore.moto`` to start one in the foreground (Ctrl-C stops it).
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.coordinator.stop_signals import run_until_stopped
from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.objectstore.access import S3Access
from laminar_kafka.devstack.processes import (
    REPO_ROOT,
    free_port,
    log_tail,
    pid_alive,
    pid_cmdline,
    port_accepts,
    terminate_pid,
)

logger = logging.getLogger(__name__)

__all__ = ["MotoServer", "start_moto_server"]

_MODULE = "laminar_kafka.devstack.objectstore.moto"
_LOG_NAME = "moto-server.log"


@dataclass(frozen=True)
class MotoServer:
    """One running moto server on 127.0.0.1 (``pid``: its process; ``log_path``: its output)."""

    pid: int
    log_path: Path
    access: S3Access

    @property
    def endpoint(self) -> str:
        return self.access.endpoint

    def env(self) -> dict[str, str]:
        """The ``AWS_*`` environment that reaches this server (:meth:`S3Access.env`)."""
        return self.access.env()

    def uri(self, bucket: str, prefix: str = "") -> str:
        """The pyarrow URI of ``bucket/prefix`` on this server (:meth:`S3Access.uri`)."""
        return self.access.uri(bucket, prefix)

    def running(self) -> bool:
        """Whether ``pid`` is alive and still this server (not a recycled pid)."""
        return pid_alive(self.pid) and _is_server_command(pid_cmdline(self.pid), self.access.port)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; no-op when the process is gone or is not ours."""
        if self.running():
            terminate_pid(self.pid, timeout)
            logger.info("moto S3 server on port %d stopped", self.access.port)


def _is_server_command(cmdline: str, port: int) -> bool:
    return f"-m {_MODULE} " in cmdline and f"--port {port} " in f"{cmdline} "


def start_moto_server(
    workdir: Path, *, buckets: Iterable[str] = (), port: int | None = None, timeout: float = 30.0,
) -> MotoServer:
    """Launch a server (detached in its own session) working in ``workdir``; wait until it answers and
    create ``buckets``. The caller stops it with :meth:`MotoServer.stop`.

    Raises ServerStartError (one line, naming its log) when it exits or ``timeout`` passes first (the
    process is stopped then).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    access = S3Access(port or free_port())
    log_path = workdir / _LOG_NAME
    command = [sys.executable, "-m", _MODULE, "--port", str(access.port), "--workdir", str(workdir)]
    started = time.monotonic()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = MotoServer(pid=process.pid, log_path=log_path, access=access)
    try:
        _wait_answering(process, server, timeout)
        for bucket in buckets:
            access.create_bucket(bucket)
    except BaseException:  # an interrupted start too: the server is stopped, then it re-raises
        terminate_pid(process.pid, 5)
        raise
    logger.info("moto S3 server ready at %s after %.1fs", access.endpoint, time.monotonic() - started)
    return server


def _wait_answering(process: subprocess.Popen[bytes], server: MotoServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise ServerStartError(f"the moto S3 server exited with code {process.returncode} before answering "
                                   f"(log {server.log_path}): {_last_line(server.log_path)}")
        if port_accepts(server.access.port, 0.2) and server.access.answers():
            return
        if time.monotonic() > deadline:
            raise ServerStartError(f"the moto S3 server did not answer within {timeout:.0f}s "
                                   f"(log {server.log_path}): {_last_line(server.log_path)}")
        time.sleep(0.05)


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in log_tail(path).splitlines() if line.strip()]
    return lines[-1] if lines else "(empty)"


def _serve(port: int) -> None:
    """Run moto's server on 127.0.0.1:port in this process until SIGTERM (moto exits 0 on it)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    try:
        from moto.server import main as moto_main
    except ImportError as exc:
        raise SystemExit(f"the moto S3 server needs moto: pip install 'moto[server]' ({exc})") from None
    print(f"S3 server (moto) on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    moto_main(["-H", "127.0.0.1", "-p", str(port)])


def main(argv: list[str] | None = None) -> None:
    """``--port P --workdir D``: serve (what :func:`start_moto_server` runs). No arguments: start a
    detached server on a free port in a temporary directory, print its environment, stop it on Ctrl-C."""
    parser = argparse.ArgumentParser(prog=f"python -m {_MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="recorded on the command line only")
    args = parser.parse_args(argv)
    if args.port is not None:
        _serve(args.port)
        return
    import tempfile

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = start_moto_server(Path(tempfile.mkdtemp(prefix="laminar-moto-")), buckets=["laminar-dev"])
    print("\n".join(f"export {k}={v}" for k, v in server.env().items()))
    print(f"# bucket laminar-dev; pyarrow URI {server.uri('laminar-dev', 'lake')}  (Ctrl-C stops it)", flush=True)
    try:
        run_until_stopped(server.running)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
