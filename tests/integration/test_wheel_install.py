"""The built wheel installs beside packages named like our folders, and runs without the dev tooling.

Issue 27: one import namespace (``laminar_kafka``). The wheel is built from this checkout and
installed into a fresh virtual environment next to stub packages called ``cluster``, ``coordinator``
and ``devstack``; nothing shadows anything. The third-party dependencies come from the test run's own
environment through a path entry (its ``.pth`` files, the editable install's among them, are not
processed there), so the test needs no package index.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("cluster", "coordinator", "devstack")


def _run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the fresh environment's bin directory, its site-packages) with the wheel and the stubs."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                  str(work / "dist"), str(ROOT)], cwd=work, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (work / "dist").glob("laminar_kafka-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=work).stdout.strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for stub in STUBS:
        (site / stub).mkdir()
        (site / stub / "__init__.py").write_text(f"STUB = {stub!r}\n")
    installed = _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], cwd=work)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv / "bin", site


def test_the_wheel_holds_one_top_level_package(fresh_install: tuple[Path, Path]) -> None:
    _, site = fresh_install
    record = next(site.glob("laminar_kafka-*.dist-info")) / "RECORD"
    tops = {line.split("/", 1)[0] for line in record.read_text().splitlines() if "/" in line}
    assert {top for top in tops if not top.endswith(".dist-info") and top != ".."} == {"laminar_kafka"}


def test_it_runs_beside_packages_named_cluster_coordinator_and_devstack(fresh_install: tuple[Path, Path],
                                                                         tmp_path: Path) -> None:
    bin_dir, _ = fresh_install
    version = _run([str(bin_dir / "laminar-kafka"), "--version"], cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("laminar-kafka "), version.stderr
    run_help = _run([str(bin_dir / "laminar-kafka"), "run", "--help"], cwd=tmp_path)
    assert run_help.returncode == 0 and "--node-id" in run_help.stdout, run_help.stderr
    library = _run([str(bin_dir / "python"), "-c",
                    "from laminar_kafka.kafka_source import KafkaSource\n"
                    "from laminar_kafka.coordinator.zk.coordinator import ZooKeeperCoordinator\n"
                    "import cluster, coordinator, devstack\n"
                    "assert (cluster.STUB, coordinator.STUB, devstack.STUB) == STUBS, 'shadowed'\n"
                    "print(KafkaSource.__module__)".replace("STUBS", repr(STUBS))], cwd=tmp_path)
    assert library.returncode == 0, library.stderr
    assert library.stdout.strip() == "laminar_kafka.kafka_source.source"


def test_the_runtime_commands_run_without_the_dev_tooling(fresh_install: tuple[Path, Path], tmp_path: Path) -> None:
    bin_dir, site = fresh_install
    shutil.rmtree(site / "laminar_kafka" / "devstack")
    for command in ("run", "status", "verify", "compact"):
        shown = _run([str(bin_dir / "laminar-kafka"), command, "--help"], cwd=tmp_path)
        assert shown.returncode == 0, f"{command}: {shown.stderr}"
    output = tmp_path / "lake"
    output.mkdir()
    verified = _run([str(bin_dir / "laminar-kafka"), "verify", "--bootstrap", "127.0.0.1:1", "--topic", "t",
                     "--output", str(output), "--timeout", "2"], cwd=tmp_path)
    assert "devstack" not in verified.stderr and "Traceback" not in verified.stderr, verified.stderr
    for argv in (["dev", "up"], ["demo"], ["chaos", "--seeds", "1"]):
        refused = _run([str(bin_dir / "laminar-kafka"), *argv], cwd=tmp_path)
        assert refused.returncode == 2, (argv, refused.stdout, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'laminar-kafka[dev]'" in lines[0], refused.stderr
        assert "laminar_kafka.devstack" in lines[0]
