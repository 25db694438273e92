"""A real S3-compatible server on loopback for the dev stack and the tests: the moto server from PyPI.

`start_s3_server` launches ``python -m laminar_kafka.devstack.s3 --port P --workdir D`` (this module's :func:`main`,
which runs ``moto.server`` with its per-request log lines silenced) in its own session, bound to
127.0.0.1 on a free port, waits until it answers and creates the wanted buckets. It returns an
:class:`S3Server` value: the endpoint, the region and the credentials, with

- :meth:`S3Server.env`: the ``AWS_*`` variables a child process needs so that pyarrow's
  ``S3FileSystem`` (and boto3, pyiceberg's FileIO) talk to this server: ``s3://bucket/prefix`` then
  works with no query parameters (pyarrow 26's AWS SDK reads ``AWS_ENDPOINT_URL`` when an
  ``S3FileSystem`` is built);
- :meth:`S3Server.uri`: the self-contained pyarrow URI
  ``s3://bucket/prefix?endpoint_override=127.0.0.1:P&scheme=http&region=R`` (credentials still come
  from the environment: pyarrow accepts them in a URI only as ``user:password@``, which would leak
  the secret into logs).

moto keeps everything in memory and does not check signatures, so the credentials are fixed
development values; they are still kept out of ``repr`` and logs. Stopping the process discards
every object. Moto is a test/dev dependency (``moto[server]``): it is imported only in the server
process.

Run ``python -m laminar_kafka.devstack.s3`` to start one in the foreground (Ctrl-C stops it).
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from laminar_kafka.coordinator.stop_signals import run_until_stopped
from laminar_kafka.devstack.errors import ServerStartError
from laminar_kafka.devstack.processes import REPO_ROOT, free_port, log_tail, pid_alive, pid_cmdline, port_accepts, terminate_pid

logger = logging.getLogger(__name__)

__all__ = [
    "DEV_BUCKET", "DEFAULT_REGION", "S3Server", "create_bucket", "s3_answers", "start_for_dev", "start_s3_server",
]

DEFAULT_REGION = "us-east-1"
#: the bucket `dev up --s3` creates
DEV_BUCKET = "laminar-dev"
#: moto checks no signature: these are development values, not secrets of any real account
_DEV_ACCESS_KEY_ID = "laminar-dev"
_DEV_SECRET_ACCESS_KEY = "laminar-dev-secret"
_MODULE = "laminar_kafka.devstack.s3"
_LOG_NAME = "s3-server.log"


@dataclass(frozen=True)
class S3Server:
    """One running S3-compatible server on 127.0.0.1 (``pid``: its process; ``log_path``: its output)."""

    port: int
    pid: int
    log_path: Path
    region: str = DEFAULT_REGION
    access_key_id: str = _DEV_ACCESS_KEY_ID
    secret_access_key: str = field(default=_DEV_SECRET_ACCESS_KEY, repr=False)

    @property
    def endpoint(self) -> str:
        """The endpoint URL (``http://127.0.0.1:P``) for boto3, ``AWS_ENDPOINT_URL``, pyiceberg's ``s3.endpoint``."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment a child process needs to reach this server through the AWS SDKs."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def uri(self, bucket: str, prefix: str = "") -> str:
        """The pyarrow URI of ``bucket/prefix`` on this server (endpoint, scheme and region in the
        query; credentials from :meth:`env`)."""
        path = f"{bucket}/{prefix.strip('/')}" if prefix.strip("/") else bucket
        return (f"s3://{quote(path)}?endpoint_override=127.0.0.1:{self.port}&scheme=http"
                f"&region={self.region}")

    def running(self) -> bool:
        """Whether ``pid`` is alive and still this server (not a recycled pid)."""
        return pid_alive(self.pid) and _is_server_command(pid_cmdline(self.pid), self.port)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; no-op when the process is gone or is not ours."""
        if self.running():
            terminate_pid(self.pid, timeout)
            logger.info("S3 server on port %d stopped", self.port)

    def to_state(self) -> dict[str, object]:
        """What a state file records (no secret: the credentials are the fixed development values)."""
        return {"name": "s3", "pid": self.pid, "port": self.port, "log": str(self.log_path),
                "endpoint": self.endpoint, "region": self.region}


def _is_server_command(cmdline: str, port: int) -> bool:
    return f"-m {_MODULE} " in cmdline and f"--port {port} " in f"{cmdline} "


def s3_answers(endpoint: str, timeout: float = 2.0) -> bool:
    """Whether an S3 endpoint answers HTTP (``ListBuckets`` with any status: moto answers 200)."""
    try:
        with urllib.request.urlopen(f"{endpoint}/", timeout=timeout) as response:
            return 200 <= response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, urllib.error.URLError, ValueError):
        return False


def create_bucket(server: S3Server, bucket: str) -> None:
    """Create ``bucket`` (already existing is fine). Raises ServerStartError in one line."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        access_key=server.access_key_id, secret_key=server.secret_access_key, region=server.region,
        endpoint_override=f"127.0.0.1:{server.port}", scheme="http", allow_bucket_creation=True,
    )
    try:
        if fs.get_file_info(bucket).type != pafs.FileType.Directory:
            fs.create_dir(bucket, recursive=False)
    except (OSError, pa.ArrowException) as exc:
        raise ServerStartError(f"cannot create bucket {bucket!r} on {server.endpoint}: {exc}") from exc


def start_s3_server(
    workdir: Path, *, buckets: Iterable[str] = (), port: int | None = None, timeout: float = 30.0,
) -> S3Server:
    """Launch a server (detached in its own session) working in ``workdir``; wait until it answers and
    create ``buckets``. The caller stops it with :meth:`S3Server.stop`.

    Raises ServerStartError quoting the end of its log when it exits or ``timeout`` passes first (the
    process is stopped then).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    chosen_port = port or free_port()
    log_path = workdir / _LOG_NAME
    command = [sys.executable, "-m", _MODULE, "--port", str(chosen_port), "--workdir", str(workdir)]
    started = time.monotonic()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = S3Server(port=chosen_port, pid=process.pid, log_path=log_path)
    try:
        _wait_answering(process, server, timeout)
        for bucket in buckets:
            create_bucket(server, bucket)
    except BaseException:  # noqa: BLE001 - an interrupted start too: the server is stopped, then it re-raises
        terminate_pid(process.pid, 5)
        raise
    logger.info("S3 server (moto) ready at %s after %.1fs", server.endpoint, time.monotonic() - started)
    return server


def _wait_answering(process: subprocess.Popen[bytes], server: S3Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise ServerStartError(
                f"the S3 server exited with code {process.returncode} before answering; last lines of "
                f"{server.log_path}:\n{log_tail(server.log_path)}"
            )
        if port_accepts(server.port, 0.2) and s3_answers(server.endpoint):
            return
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"the S3 server did not answer within {timeout:.0f}s; last lines of {server.log_path}:\n"
                f"{log_tail(server.log_path)}"
            )
        time.sleep(0.05)


def start_for_dev(state_dir: Path) -> S3Server:
    """The ``dev up --s3`` hook: a server working in ``<state_dir>/s3`` with the bucket
    :data:`DEV_BUCKET`. Record :meth:`S3Server.to_state`; stop it with :meth:`S3Server.stop`."""
    return start_s3_server(Path(state_dir) / "s3", buckets=[DEV_BUCKET])


def _serve(port: int) -> None:
    """Run moto's server on 127.0.0.1:port in this process until SIGTERM (moto exits 0 on it)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    try:
        from moto.server import main as moto_main
    except ImportError as exc:
        raise SystemExit(f"the S3 dev server needs moto: pip install 'moto[server]' ({exc})") from None
    print(f"S3 server (moto) on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    moto_main(["-H", "127.0.0.1", "-p", str(port)])


def main(argv: list[str] | None = None) -> None:
    """``--port P --workdir D``: serve (what :func:`start_s3_server` runs). No arguments: start a
    detached server on a free port in a temporary directory, print its environment, stop it on Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m laminar_kafka.devstack.s3", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="recorded on the command line only")
    args = parser.parse_args(argv)
    if args.port is not None:
        _serve(args.port)
        return
    import tempfile

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = start_s3_server(Path(tempfile.mkdtemp(prefix="laminar-s3-")), buckets=[DEV_BUCKET])
    print("\n".join(f"export {k}={v}" for k, v in server.env().items() if "SECRET" not in k))
    print("export AWS_SECRET_ACCESS_KEY=<any non-empty value: moto checks no signature>")
    print(f"# bucket {DEV_BUCKET}; pyarrow URI {server.uri(DEV_BUCKET, 'lake')}  (Ctrl-C stops it)", flush=True)
    try:
        run_until_stopped(server.running)
    finally:
        server.stop()


if __name__ == "__main__":
    main()


# -- `laminar-kafka dev up --s3`: a recorded server beside the dev stack ------------------------------


def dev_state_file(stack_state_file: Path) -> Path:
    """Where ``dev up --s3`` records its server: beside the stack's state file."""
    return stack_state_file.with_name(f"{stack_state_file.stem}.s3.json")


def record_dev_server(server: S3Server, stack_state_file: Path) -> None:
    path = dev_state_file(stack_state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(server.to_state(), indent=2))
    temporary.replace(path)


def recorded_dev_server(stack_state_file: Path) -> S3Server | None:
    """The server ``dev up --s3`` recorded (None without a record, or an unreadable one)."""
    try:
        state = json.loads(dev_state_file(stack_state_file).read_text())
        return S3Server(port=int(state["port"]), pid=int(state["pid"]), log_path=Path(state["log"]),
                        region=str(state.get("region", DEFAULT_REGION)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop_dev_server(stack_state_file: Path) -> bool:
    """Stop the recorded server (only if it still is ours) and forget it; True if one was recorded."""
    server = recorded_dev_server(stack_state_file)
    dev_state_file(stack_state_file).unlink(missing_ok=True)
    if server is None:
        return False
    server.stop()
    return True
