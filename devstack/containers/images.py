"""The image recipes and their cached builds (`python -m laminar_kafka.devstack.containers build`).

Every recipe is a Dockerfile under `docker/` whose BASE build argument names its parent recipe's
image, except the base image itself (debootstrap + import, or a pulled public image). The inputs
hash of an image covers the recipe version, its Dockerfile and build context (every file, with
its mode), its build arguments and its parent's image id; it is stored in the label
`dev.laminar.inputs`, and an image whose label matches is not rebuilt.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from laminar_kafka.devstack.containers.engine import (
    BASE_IMAGE,
    DOCKER_DIR,
    IMAGES_DIR,
    INPUTS_LABEL,
    JAVA_IMAGE,
    JVM_SERVERS_IMAGE,
    KAFKA_IMAGE,
    NODE_IMAGE,
    PUBLIC_BASE,
    PUBLIC_PYTHON,
    PYTHON_IMAGE,
    RECIPE_VERSION,
    REPO,
    REST_CATALOG_IMAGE,
    SEAWEEDFS_IMAGE,
    SUITE,
    ZOOKEEPER_IMAGE,
    ContainerError,
    check_container_runs,
    first_line_of,
    import_rootfs,
)
from laminar_kafka.devstack.errors import DevStackError
from laminar_kafka.devstack.jvm.artifacts import default_cache_dir, ensure_artifacts
from laminar_kafka.devstack.processes import log_tail

LOG_TAIL_LINES = 30
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Recipe:
    """One image: its tag, Dockerfile (None: the base), parent recipe and build-context files."""

    key: str
    tag: str
    what: str
    dockerfile: Path | None = None
    parent: str | None = None
    context: Callable[[], dict[str, Path]] = dict


def _images_file(*names: str) -> Callable[[], dict[str, Path]]:
    return lambda: {name: IMAGES_DIR / name for name in names}


def _jvm_servers_context() -> dict[str, Path]:
    return {"lib": ensure_artifacts(), "log4j2.properties": IMAGES_DIR / "log4j2.properties"}


def _python_context() -> dict[str, Path]:
    if HOST_CA_BUNDLE.exists():
        return {"ca-certificates.crt": HOST_CA_BUNDLE}
    import certifi  # the requests dependency of the docker SDK brings it

    return {"ca-certificates.crt": Path(certifi.where())}


def _node_context() -> dict[str, Path]:
    return {name: REPO / name for name in ("pyproject.toml", "README.md", "laminar_kafka", "connector", "kafka_source",
                                          "redis_source", "coordinator", "cluster", "devstack")}


def _seaweedfs_context() -> dict[str, Path]:
    from laminar_kafka.devstack.objectstore.seaweedfs import weed_binary

    try:
        weed = weed_binary()
    except DevStackError as exc:
        raise ContainerError(f"the SeaweedFS image copies the host's weed binary: {exc}", cause=exc) from exc
    return {"weed": weed, "seaweedfs-entrypoint.sh": IMAGES_DIR / "seaweedfs-entrypoint.sh"}


def _rest_catalog_context() -> dict[str, Path]:
    from laminar_kafka.devstack.jvm.rest_catalog import ensure_rest_catalog_build, ensure_rest_catalog_s3_build

    try:
        return {"lib": ensure_rest_catalog_build(), "s3": ensure_rest_catalog_s3_build()}
    except DevStackError as exc:
        raise ContainerError(f"the REST catalog image needs its jars: {exc}", cause=exc) from exc


RECIPES: tuple[Recipe, ...] = (
    Recipe("base", BASE_IMAGE, f"Debian {SUITE} minbase (debootstrap from the host's apt mirror)"),
    Recipe("java", JAVA_IMAGE, "Java 17 runtime", IMAGES_DIR / "java.Dockerfile", "base"),
    Recipe("python", PYTHON_IMAGE, "Python 3.11 with pip (python:3.11-slim stand-in)",
           IMAGES_DIR / "python.Dockerfile", "base", _python_context),
    Recipe("jvm-servers", JVM_SERVERS_IMAGE, "the pinned Kafka and ZooKeeper jars",
           IMAGES_DIR / "jvm-servers.Dockerfile", "java", _jvm_servers_context),
    Recipe("kafka", KAFKA_IMAGE, "Kafka broker (KRaft)", IMAGES_DIR / "kafka.Dockerfile", "jvm-servers",
           _images_file("kafka-entrypoint.sh")),
    Recipe("zookeeper", ZOOKEEPER_IMAGE, "ZooKeeper server", IMAGES_DIR / "zookeeper.Dockerfile", "jvm-servers",
           _images_file("zookeeper-entrypoint.sh")),
    Recipe("node", NODE_IMAGE, "laminar-kafka node (docker/Dockerfile)", DOCKER_DIR / "Dockerfile", "python",
           _node_context),
    Recipe("seaweedfs", SEAWEEDFS_IMAGE, "SeaweedFS S3 (the host's weed binary)", IMAGES_DIR / "seaweedfs.Dockerfile",
           "base", _seaweedfs_context),
    Recipe("rest-catalog", REST_CATALOG_IMAGE, "Iceberg REST catalog server with S3FileIO",
           IMAGES_DIR / "rest-catalog.Dockerfile", "java", _rest_catalog_context),
)
RECIPE_KEYS = tuple(recipe.key for recipe in RECIPES)
_BY_KEY = {recipe.key: recipe for recipe in RECIPES}


@dataclass
class BuildResult:
    key: str
    tag: str
    image_id: str
    seconds: float
    cached: bool

    def line(self) -> str:
        state = "cached" if self.cached else f"built in {self.seconds:.1f} s"
        return f"{self.key:<12} {self.tag:<36} {self.image_id.removeprefix('sha256:')[:12]}  {state}"


def apt_mirrors(root: Path = Path("/")) -> tuple[str, str | None]:
    """(Debian mirror, security mirror or None) that the host's own apt sources use for SUITE.

    `LAMINAR_DEBIAN_MIRROR` overrides; a host without Debian sources gets deb.debian.org.
    """
    configured = os.environ.get("LAMINAR_DEBIAN_MIRROR")
    entries: list[tuple[str, list[str]]] = []  # (uri, suites)
    sources = [root / "etc/apt/sources.list", *sorted((root / "etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        with contextlib.suppress(OSError):
            text = path.read_text()
            if path.suffix == ".sources":
                for stanza in text.split("\n\n"):
                    fields = dict(
                        (k.strip().lower(), v.strip()) for k, _, v in
                        (line.partition(":") for line in stanza.splitlines() if ":" in line and not line.startswith("#"))
                    )
                    for uri in fields.get("uris", "").split():
                        entries.append((uri, fields.get("suites", "").split()))
            else:
                for line in text.splitlines():
                    words = [w for w in line.split("#")[0].split() if not w.startswith("[") and not w.endswith("]")]
                    if len(words) >= 3 and words[0] == "deb":
                        entries.append((words[1], [words[2]]))
    mirror = configured or next((u for u, s in entries if SUITE in s and u.startswith("http")), None)
    security = next((u for u, s in entries if f"{SUITE}-security" in s and u.startswith("http")), None)
    return (mirror or "http://deb.debian.org/debian").rstrip("/"), security.rstrip("/") if security else None


def _hash_tree(digest: Any, path: Path, name: str) -> None:
    if path.is_symlink():  # laminar_kafka/<folder> -> ../<folder>: copied as a link, hashed as one
        digest.update(f"{name}\0->{os.readlink(path)}\0".encode())
        return
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.name != "__pycache__" and not child.name.endswith(".pyc"):
                _hash_tree(digest, child, f"{name}/{child.name}")
        return
    digest.update(f"{name}\0{os.stat(path).st_mode & 0o111}\0{path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)


def _copy_context(files: dict[str, Path], target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name, source in files.items():
        if source.is_dir():
            # links stay links: laminar_kafka/<folder> -> ../<folder> resolves to the folder copied beside it
            shutil.copytree(source, target / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(source, target / name)


class ImageBuilder:
    """Builds recipes in dependency order; `bases` is "debootstrap", "public" or "auto"."""

    def __init__(self, client: Any, *, bases: str = "auto", rebuild: bool = False,
                 log: Callable[[str], None] = print, cache_dir: Path | None = None) -> None:
        self.client = client
        self.rebuild = rebuild
        self.log = log
        self.cache = (cache_dir or default_cache_dir()) / "images"
        if bases == "auto":
            bases = "debootstrap" if shutil.which("debootstrap") and os.geteuid() == 0 else "public"
        self.bases = bases

    def build(self, keys: list[str] | None = None) -> list[BuildResult]:
        """Build `keys` (default: all) and the recipes they depend on; returns one result per image."""
        wanted = set(keys or RECIPE_KEYS)
        for key in list(wanted):
            parent = _BY_KEY[key].parent
            while parent:
                wanted.add(parent)
                parent = _BY_KEY[parent].parent
        self.cache.mkdir(parents=True, exist_ok=True)
        results: list[BuildResult] = []
        with open(self.cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time on this machine
            check_container_runs(self.client)
            for recipe in RECIPES:
                if recipe.key in wanted:
                    result = self._build_one(recipe)
                    self.log(result.line())
                    results.append(result)
            if any(not r.cached for r in results):
                self._remove_replaced()
        return results

    def _remove_replaced(self) -> None:
        """Remove the untagged images that a rebuild replaced (ours only: they carry the inputs label)."""
        with contextlib.suppress(Exception):  # a tidy-up: a client that cannot list leaves them
            for image in self.client.images.list(filters={"dangling": True, "label": INPUTS_LABEL}):
                with contextlib.suppress(Exception):  # still used by a container, or a parent of another
                    self.client.images.remove(image.id)

    # ---- one image ----

    def _current(self, tag: str, inputs: str) -> str | None:
        if self.rebuild:
            return None
        try:
            image = self.client.images.get(tag)
        except Exception:  # noqa: BLE001 - not there
            return None
        return image.id if (image.labels or {}).get(INPUTS_LABEL) == inputs else None

    def _build_one(self, recipe: Recipe) -> BuildResult:
        check_container_runs(self.client)
        started = time.monotonic()
        if recipe.key == "base":
            image_id, cached = self._base()
        elif recipe.key == "python" and self.bases == "public":
            image_id, cached = self._pull_as(PUBLIC_PYTHON, recipe.tag)
        else:
            image_id, cached = self._dockerfile(recipe)
        return BuildResult(recipe.key, recipe.tag, image_id, time.monotonic() - started, cached)

    def _pull_as(self, public: str, tag: str) -> tuple[str, bool]:
        try:
            image = self.client.images.get(public)
            cached = True
        except Exception:  # noqa: BLE001 - not there: pull it
            try:
                image = self.client.images.pull(public)
            except Exception as exc:  # any client failure to pull is one ContainerError with a hint
                raise ContainerError(
                    f"cannot pull {public} ({first_line_of(exc)[:160]}); where no registry is reachable, "
                    "install debootstrap and build with --bases debootstrap", cause=exc) from exc
            cached = False
        repository, _, version = tag.rpartition(":")
        image.tag(repository, version)
        return image.id, cached

    def _base(self) -> tuple[str, bool]:
        if self.bases == "public":
            return self._pull_as(PUBLIC_BASE, BASE_IMAGE)
        mirror, security = apt_mirrors()
        digest = hashlib.sha256(f"{RECIPE_VERSION}\0debootstrap\0minbase\0{SUITE}\0{mirror}\0{security}".encode())
        inputs = digest.hexdigest()
        current = self._current(BASE_IMAGE, inputs)
        if current:
            return current, True
        debootstrap = shutil.which("debootstrap")
        if debootstrap is None or os.geteuid() != 0:
            raise ContainerError("the base image needs debootstrap, as root: apt-get install debootstrap "
                                 "(or build with --bases public where a registry is reachable)")
        (self.cache / "base.log").unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="base-", dir=self.cache) as scratch:
            rootfs = Path(scratch) / "rootfs"
            self._run([debootstrap, "--variant=minbase", SUITE, str(rootfs), mirror], "base")
            lines = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
            if security:
                lines.append(f"deb {security} {SUITE}-security main")
            (rootfs / "etc/apt/sources.list").write_text("\n".join(lines) + "\n")
            for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
                for path in (rootfs / leftover).glob("*"):
                    if path.is_file():
                        path.unlink()
            tar = Path(scratch) / "rootfs.tar"
            self._run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tar), "."], "base")
            image_id = import_rootfs(self.client, tar, BASE_IMAGE,
                               [f"LABEL {INPUTS_LABEL}={inputs}", "ENV LANG=C.UTF-8", 'CMD ["bash"]'])
        return image_id, False

    def _dockerfile(self, recipe: Recipe) -> tuple[str, bool]:
        assert recipe.dockerfile is not None and recipe.parent is not None
        parent = _BY_KEY[recipe.parent]
        parent_id = self.client.images.get(parent.tag).id
        args = {"BASE": parent.tag}
        with tempfile.TemporaryDirectory(prefix=f"{recipe.key}-", dir=self.cache) as scratch:
            context = Path(scratch)
            _copy_context(recipe.context(), context)
            shutil.copy2(recipe.dockerfile, context / "Dockerfile")
            digest = hashlib.sha256(f"{RECIPE_VERSION}\0{sorted(args.items())}\0{parent_id}\0".encode())
            _hash_tree(digest, context, ".")
            inputs = digest.hexdigest()
            current = self._current(recipe.tag, inputs)
            if current:
                return current, True
            log_path = self.cache / f"{recipe.key}.log"
            error: str | None = None
            with open(log_path, "w") as log:
                for chunk in self.client.api.build(
                    path=str(context), dockerfile="Dockerfile", tag=recipe.tag, buildargs=args,
                    labels={INPUTS_LABEL: inputs}, rm=True, forcerm=True, pull=False, decode=True,
                ):
                    if "stream" in chunk:
                        log.write(chunk["stream"])
                    if "error" in chunk:
                        error = str(chunk["error"]).strip()
                        log.write(f"ERROR: {error}\n")
            if error is not None:
                raise ContainerError(f"building {recipe.tag} failed: {error}\n{log_tail(log_path, LOG_TAIL_LINES)}")
        image = self.client.images.get(recipe.tag)
        if (image.labels or {}).get(INPUTS_LABEL) != inputs:
            raise ContainerError(f"the engine built {recipe.tag} without the label {INPUTS_LABEL}")
        return image.id, False

    def _run(self, command: list[str], key: str) -> None:
        log_path = self.cache / f"{key}.log"
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            raise ContainerError(f"{command[0]} failed ({result.returncode}):\n{log_tail(log_path, LOG_TAIL_LINES)}")


def image_status(client: Any) -> list[tuple[str, str, str]]:
    """(key, tag, 'present <id>' or 'missing') for every recipe (whether it is current needs a build)."""
    rows = []
    for recipe in RECIPES:
        try:
            image = client.images.get(recipe.tag)
            rows.append((recipe.key, recipe.tag, f"present {image.id.removeprefix('sha256:')[:12]}"))
        except Exception:  # noqa: BLE001 - not there
            rows.append((recipe.key, recipe.tag, "missing"))
    return rows
