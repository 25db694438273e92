"""Unit tests of the jar locks and their downloader (devstack/jvm/locks.py, fetch.py, artifacts.cached_jar_build).

No network: the Maven repository is a local HTTP server over a temporary directory of fake jars."""
from __future__ import annotations

import functools
import hashlib
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm import artifacts
from laminar_kafka.devstack.jvm.fetch import ChecksumError, fetch_jars
from laminar_kafka.devstack.jvm.lockgen import MATRIX_PAIRS, locked_builds
from laminar_kafka.devstack.jvm.locks import (
    LOCKS_DIR,
    JarBuild,
    LockedJar,
    lock_path,
    parse_dependency_list,
    parse_lock,
    read_lock,
    render_lock,
)

REPO_ROOT = Path(__file__).resolve().parents[4]
KAFKA = LockedJar("org.apache.kafka", "kafka_2.13", "4.1.1", "", "jar")
TESTS_JAR = LockedJar("org.apache.iceberg", "iceberg-core", "1.10.0", "tests", "jar")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_jar_is_named_as_maven_central_and_copy_dependencies_name_it() -> None:
    assert KAFKA.file_name == "kafka_2.13-4.1.1.jar"
    assert KAFKA.cache_name == "org.apache.kafka.kafka_2.13-4.1.1.jar"
    assert KAFKA.url("https://repo1.maven.org/maven2") == \
        "https://repo1.maven.org/maven2/org/apache/kafka/kafka_2.13/4.1.1/kafka_2.13-4.1.1.jar"
    assert TESTS_JAR.file_name == "iceberg-core-1.10.0-tests.jar"
    assert TESTS_JAR.cache_name == "org.apache.iceberg.iceberg-core-1.10.0-tests.jar"


def test_a_lock_renders_sorted_and_parses_back() -> None:
    jars = (TESTS_JAR.with_sha256("b" * 64), KAFKA.with_sha256("a" * 64))
    text = render_lock(jars, "first line\nsecond line")
    assert text.splitlines()[:2] == ["# first line", "# second line"]
    assert text.splitlines()[2] == f"org.apache.iceberg iceberg-core 1.10.0 tests jar {'b' * 64}"
    assert text.splitlines()[3] == f"org.apache.kafka kafka_2.13 4.1.1 - jar {'a' * 64}"
    assert set(parse_lock(text, "x.txt")) == set(jars)


def test_rendering_a_jar_without_checksum_is_refused() -> None:
    with pytest.raises(ArtifactError, match="no SHA-256"):
        render_lock((KAFKA,), "h")


@pytest.mark.parametrize(("text", "error"), [
    ("org.apache.kafka kafka_2.13 4.1.1 - jar\n", r"x\.txt:1: expected"),
    ("# only a comment\n\n", "locks no jar"),
    (f"g a 1 - jar {'A' * 64}\n", r"x\.txt:1: expected"),  # upper-case hex is not what the generator writes
    (f"# c\ng a 1 - jar {'a' * 63}\n", r"x\.txt:2: expected"),
])
def test_a_malformed_lock_names_the_file_and_line(text: str, error: str) -> None:
    with pytest.raises(ArtifactError, match=error):
        parse_lock(text, "x.txt")


def test_maven_dependency_list_output_parses_into_coordinates() -> None:
    listing = """
The following files have been resolved:
   org.apache.kafka:kafka_2.13:jar:4.1.1:compile:/root/.m2/repository/org/apache/kafka/kafka_2.13/4.1.1/kafka_2.13-4.1.1.jar
   io.netty:netty-tcnative-boringssl-static:jar:linux-x86_64:2.0.70.Final:compile:/r/x.jar
   org.apache.iceberg:iceberg-core:test-jar:tests:1.10.0:compile:/r/y.jar -- module iceberg.core [auto]
   org.lz4:lz4-java:jar:1.8.0:runtime -- module org.lz4.java
   none
"""
    assert parse_dependency_list(listing) == (
        KAFKA,
        LockedJar("io.netty", "netty-tcnative-boringssl-static", "2.0.70.Final", "linux-x86_64", "jar"),
        TESTS_JAR,
        LockedJar("org.lz4", "lz4-java", "1.8.0", "", "jar"),
    )


def test_every_locked_build_has_a_committed_lock_that_parses() -> None:
    for build in locked_builds():
        jars = read_lock(build.name)
        assert jars, build.name
        assert len({jar.cache_name for jar in jars}) == len(jars)
    assert read_lock("jvm-kafka-4.0.0-zookeeper-3.9.3") is None
    stale = {path.stem for path in LOCKS_DIR.glob("*.txt")} - {build.name for build in locked_builds()}
    assert not stale, f"locks of no build: {stale}"


def test_the_locks_cover_the_compatibility_matrix_pairs() -> None:
    script = (REPO_ROOT / ".ci" / "matrix.sh").read_text()
    kafka_39 = re.search(r"^KAFKA_39=(\S+)$", script, re.MULTILINE)
    zookeeper_38 = re.search(r"^ZOOKEEPER_38=(\S+)$", script, re.MULTILINE)
    assert kafka_39 and zookeeper_38
    pinned_zookeeper = artifacts.pinned_versions()[1]
    assert set(MATRIX_PAIRS) == {(kafka_39.group(1), zookeeper_38.group(1)), (kafka_39.group(1), pinned_zookeeper)}
    for kafka, zookeeper in MATRIX_PAIRS:
        assert lock_path(f"jvm-kafka-{kafka}-zookeeper-{zookeeper}").is_file()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no access log on stderr
        pass


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(the directory a local HTTP server serves as a Maven repository, its base URL)."""
    root = tmp_path / "repository"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _publish(root: Path, jar: LockedJar, data: bytes) -> LockedJar:
    """Put ``data`` in the repository as ``jar``; return ``jar`` locked to ``data``'s SHA-256."""
    path = root / jar.url("").lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return jar.with_sha256(_sha(data))


def test_fetch_downloads_every_jar_under_its_cache_name(repository: tuple[Path, str], tmp_path: Path) -> None:
    root, base = repository
    jars = (_publish(root, KAFKA, b"kafka classes"), _publish(root, TESTS_JAR, b"iceberg tests"))
    out = tmp_path / "out"
    out.mkdir()
    assert fetch_jars(jars, out, base) == len(b"kafka classes") + len(b"iceberg tests")
    assert (out / KAFKA.cache_name).read_bytes() == b"kafka classes"
    assert (out / TESTS_JAR.cache_name).read_bytes() == b"iceberg tests"


def test_a_corrupted_jar_is_one_error_naming_the_file(repository: tuple[Path, str], tmp_path: Path) -> None:
    root, base = repository
    locked = _publish(root, KAFKA, b"kafka classes")
    (root / KAFKA.url("").lstrip("/")).write_bytes(b"kafka classes, tampered")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ChecksumError, match=r"checksum mismatch for org\.apache\.kafka\.kafka_2\.13-4\.1\.1\.jar") as caught:
        fetch_jars((locked,), out, base)
    assert locked.sha256 in str(caught.value) and _sha(b"kafka classes, tampered") in str(caught.value)
    assert list(out.iterdir()) == []


def test_a_missing_jar_names_its_url(repository: tuple[Path, str], tmp_path: Path) -> None:
    _, base = repository
    with pytest.raises(ArtifactError, match=re.escape(KAFKA.url(base))):
        fetch_jars((KAFKA.with_sha256("a" * 64),), tmp_path, base)


def test_a_file_url_repository_works_too(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    locked = _publish(root, KAFKA, b"kafka classes")
    out = tmp_path / "out"
    out.mkdir()
    fetch_jars((locked,), out, root.as_uri())
    assert (out / KAFKA.cache_name).read_bytes() == b"kafka classes"


def _write_lock(locks: Path, name: str, jars: tuple[LockedJar, ...]) -> None:
    locks.mkdir(exist_ok=True)
    lock_path(name, locks).write_text(render_lock(jars, "test lock"))


def _no_check(directory: Path) -> None:
    return None


def test_a_locked_build_fills_its_cache_directory_once(repository: tuple[Path, str], tmp_path: Path) -> None:
    root, base = repository
    locks, cache = tmp_path / "locks", tmp_path / "cache"
    jars = (_publish(root, KAFKA, b"kafka classes"), _publish(root, TESTS_JAR, b"iceberg tests"))
    build = JarBuild("servers-1", tmp_path / "pom.xml")
    _write_lock(locks, build.name, jars)
    target = artifacts.cached_jar_build(cache, build, "marker\n", "resolve servers", _no_check, base_url=base,
                                        locks_dir=locks)
    assert target == cache / "servers-1"
    assert sorted(path.name for path in target.iterdir()) == sorted([".complete", KAFKA.cache_name, TESTS_JAR.cache_name])
    assert (target / ".complete").read_text() == "marker\n"
    assert [path.name for path in cache.iterdir() if path.name.startswith(".building-")] == []
    # the second call neither downloads (the repository is gone) nor changes the directory
    for path in root.rglob("*.jar"):
        path.unlink()
    assert artifacts.cached_jar_build(cache, build, "marker\n", "resolve servers", _no_check, base_url=base,
                                      locks_dir=locks) == target


def test_a_failed_download_leaves_no_cache_directory_and_is_not_retried(repository: tuple[Path, str], tmp_path: Path) -> None:
    root, base = repository
    locks, cache = tmp_path / "locks", tmp_path / "cache"
    good = _publish(root, KAFKA, b"kafka classes")
    bad = _publish(root, TESTS_JAR, b"iceberg tests").with_sha256(_sha(b"something else"))
    build = JarBuild("servers-2", tmp_path / "pom.xml")
    _write_lock(locks, build.name, (good, bad))
    with pytest.raises(ChecksumError, match=re.escape(TESTS_JAR.cache_name)):
        artifacts.cached_jar_build(cache, build, "m", "resolve servers", _no_check, base_url=base, locks_dir=locks)
    assert not (cache / build.name).exists()
    assert [path.name for path in cache.iterdir() if not path.name.endswith(".lock")] == []


def test_the_callers_check_runs_on_the_downloaded_jars(repository: tuple[Path, str], tmp_path: Path) -> None:
    root, base = repository
    locks, cache = tmp_path / "locks", tmp_path / "cache"
    build = JarBuild("servers-3", tmp_path / "pom.xml")
    _write_lock(locks, build.name, (_publish(root, TESTS_JAR, b"iceberg tests"),))

    def needs_kafka(directory: Path) -> None:
        if not any(directory.glob("*kafka_2.13-*.jar")):
            raise ArtifactError("no Kafka jar was resolved")

    with pytest.raises(ArtifactError, match="no Kafka jar"):
        artifacts.cached_jar_build(cache, build, "m", "resolve servers", needs_kafka, base_url=base, locks_dir=locks)
    assert not (cache / build.name).exists()


def test_a_build_without_lock_goes_to_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_maven(target: Path, marker: str, what: str, maven_args: object, built_in: object) -> Path:
        seen.update(target=target, what=what)
        return target

    monkeypatch.setattr(artifacts, "cached_maven_build", fake_maven)
    build = JarBuild("unlocked", tmp_path / "pom.xml", (("kafka.version", "4.0.0"),))
    assert artifacts.cached_jar_build(tmp_path / "cache", build, "m", "resolve x", _no_check,
                                      locks_dir=tmp_path / "locks") == tmp_path / "cache" / "unlocked"
    assert seen == {"target": tmp_path / "cache" / "unlocked", "what": "resolve x"}
    assert "-Dkafka.version=4.0.0" in build.maven_args(tmp_path)
    assert "-DexcludeTransitive=true" in JarBuild("n", tmp_path, transitive=False).maven_args(tmp_path)
