"""The layering of the distribution, read from the source: floors, no circles, small package roots.

One namespace, ``laminar_kafka`` (docs/DESIGN.md, "The house"). Its floors, lowest first:

0. ``laminar_kafka.errors``: the distribution's exception root (``LaminarError``) and its one
   ``ConfigurationError``; every floor imports it and it imports nothing of ours.
1. ``coordinator``: vnode assignment (pure) and its backends.
2. ``connector``: the source-connector protocol, its checkpoint, errors, the vnode ownership and
   drain state machines, ``PartitionedLogSource`` and the conformance kit; nothing of Kafka. Of the
   coordinator it uses only the pure modules (vnode routing and rounds, the codec, the errors).
3. ``kafka_source`` and ``redis_source``, the connectors over the protocol, side by side: neither
   imports the other; ``kafka_source`` too uses only the pure coordinator.
4. ``cluster`` (the node runtime) and ``devstack`` (the dev servers), side by side.
5. The top floor, ``laminar_kafka`` itself: the command line, the demo and the chaos campaign.

Every import counts, at module level or inside a function, under ``TYPE_CHECKING`` or not.
"""
from __future__ import annotations

import ast
import os
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NS = "laminar_kafka"
# repository folders mapped into NS
MAPPED = ("coordinator", "connector", "kafka_source", "redis_source", "cluster", "devstack")
FLOOR = {"coordinator": 1, "connector": 2, "kafka_source": 3, "redis_source": 3, "cluster": 4, "devstack": 4}
TOP = 5
#: floor 0: modules of the top folder that every floor may import (they import nothing of ours)
GROUND = (f"{NS}.errors",)
PURE_COORDINATOR = ("coordinator.vnodes.", "coordinator.codec", "coordinator.errors", "coordinator.versioning")
MAX_ROOT_MODULES = 15


def _module_files() -> dict[str, Path]:
    """Every module of the distribution by its dotted name (packages by their ``__init__``)."""
    files: dict[str, Path] = {}
    for folder in (NS, *MAPPED):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            prefix = [NS] if folder == NS else [NS, folder]
            files[".".join(prefix + parts)] = path
    return files


FILES = _module_files()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of the distribution that ``name`` imports (a name imported from a package counts
    as its submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in FILES else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in FILES:
                target = target.rpartition(".")[0]
            if target.startswith(NS) and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in FILES.items()}


def _floor(name: str) -> tuple[int, str]:
    if name in GROUND:
        return 0, "ground"
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in FLOOR:
        return FLOOR[parts[1]], parts[1]
    return TOP, "top"


def test_the_scan_sees_the_whole_distribution() -> None:
    assert len(FILES) > 150
    assert f"{NS}.cluster.runtime.node_runtime" in GRAPH[f"{NS}.cluster.node"]
    assert f"{NS}.devstack.jvm.servers" in GRAPH[f"{NS}.devstack.stack"]


def test_the_ground_floor_imports_nothing_of_ours_and_every_floor_uses_it() -> None:
    for name in GROUND:
        assert GRAPH[name] == set(), name
    users = {_floor(name)[1] for name, targets in GRAPH.items() if set(GROUND) & targets}
    assert users >= {"coordinator", "connector", "kafka_source", "redis_source", "cluster", "devstack", "top"}


def test_every_import_points_down_or_sideways_within_its_floor() -> None:
    upward = []
    for name, targets in GRAPH.items():
        floor, area = _floor(name)
        for target in targets:
            target_floor, target_area = _floor(target)
            if target_floor > floor or (target_floor == floor and target_area != area):
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that run up (or across cluster/devstack):\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("area", ["connector", "kafka_source"])
def test_the_protocol_and_kafka_use_only_the_pure_coordinator(area: str) -> None:
    used = {target for name, targets in GRAPH.items() if _floor(name)[1] == area
            for target in targets if _floor(target)[1] == "coordinator"}
    other = {t for t in used if not t.removeprefix(f"{NS}.").startswith(PURE_COORDINATOR)}
    assert used and not other, other


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_there_are_no_import_circles() -> None:
    assert _cycles() == []


def test_the_cycle_finder_finds_a_circle() -> None:
    global GRAPH
    saved = GRAPH
    try:
        GRAPH = {**saved, f"{NS}.coordinator.codec": saved[f"{NS}.coordinator.codec"] | {f"{NS}.cluster.node"}}
        assert any(f"{NS}.coordinator.codec" in cycle for cycle in _cycles())
    finally:
        GRAPH = saved


def test_no_package_root_holds_more_than_15_modules() -> None:
    per_package: dict[str, int] = defaultdict(int)
    for name, path in FILES.items():
        if path.name != "__init__.py":
            per_package[name.rpartition(".")[0]] += 1
    crowded = {package: count for package, count in per_package.items() if count > MAX_ROOT_MODULES}
    assert not crowded, crowded


def test_every_package_is_in_the_wheel() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name for name, path in FILES.items() if path.name == "__init__.py"}
    assert set(settings["packages"]) == packages
    assert settings["package-dir"] == {NS: NS, **{f"{NS}.{folder}": folder for folder in MAPPED}}


BARE = re.compile(rf"^\s*(?:from|import)\s+(?:{'|'.join(MAPPED)})(?:[.\s]|$)", re.MULTILINE)


@pytest.mark.parametrize("folder", [NS, *MAPPED, "tests", "bench"])
def test_nothing_imports_a_bare_top_level_name(folder: str) -> None:
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / folder).rglob("*.py") if BARE.search(path.read_text())]
    assert not offenders, f"import through {NS}. (issue 27): {offenders}"


@pytest.mark.parametrize("folder", [NS, *MAPPED, "tests", "bench", "docker"])
def test_no_symbolic_link_in_the_tree(folder: str) -> None:
    """The node image copies these folders and the wheel packs them: a stray link (one into its own
    folder broke `make images` on CI once) must fail here, in seconds, not there. The only links are
    ``laminar_kafka/<folder> -> ../<folder>`` for each mapped folder, so that static tools (mypy, an
    editor) resolve ``laminar_kafka.<folder>`` from the repository as the installed package does."""
    links = {str(path.relative_to(ROOT)): os.readlink(path) for path in _walk(ROOT / folder) if path.is_symlink()}
    expected = {f"{NS}/{mapped}": f"../{mapped}" for mapped in MAPPED} if folder == NS else {}
    assert links == expected, f"symbolic links in the tree: {links}"


def _walk(top: Path) -> list[Path]:
    found: list[Path] = []
    for directory, subdirectories, names in os.walk(top):  # does not follow links to directories
        found += [Path(directory, name) for name in (*subdirectories, *names)]
    return found


def test_the_node_image_copies_every_package() -> None:
    """docker/Dockerfile installs the wheel from the folders it copies: a package left out fails the
    image build (`make images`) on CI, after minutes; here in a second."""
    from laminar_kafka.devstack.containers.images import _node_context

    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    ignores = [(ROOT / ".dockerignore").read_text(), (ROOT / "docker" / "Dockerfile.dockerignore").read_text()]
    for folder in (NS, *MAPPED):
        assert f"COPY {folder} ./{folder}" in dockerfile, folder
        assert all(f"!{folder}/" in ignore.splitlines() for ignore in ignores), folder
        assert folder in _node_context(), folder


#: what the node runtime (cluster/runtime/) holds only through collaborators and protocols
RUNTIME_FORBIDDEN = ("confluent_kafka", f"{NS}.cluster.lake.parquet", f"{NS}.cluster.lake.iceberg")


def _forbidden_runtime_imports(source: str) -> list[str]:
    """The modules named by ``source``'s imports (anywhere in it) that the runtime must not import."""
    named: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            named += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return sorted({name for name in named for banned in RUNTIME_FORBIDDEN
                   if name == banned or name.startswith(f"{banned}.")})


def test_the_runtime_imports_neither_a_lake_format_nor_the_kafka_client() -> None:
    """The runtime publishes into a lake output and reads topologies through a callable it is given:
    no module of cluster/runtime/ imports Parquet's or Iceberg's modules or confluent_kafka."""
    assert _forbidden_runtime_imports("from laminar_kafka.cluster.lake import parquet\nimport confluent_kafka.admin") \
        == ["confluent_kafka.admin", "laminar_kafka.cluster.lake.parquet"]  # the check itself finds them
    runtime = sorted((ROOT / "cluster" / "runtime").glob("*.py"))
    assert len(runtime) > 10
    found = {str(path.relative_to(ROOT)): bad for path in runtime if (bad := _forbidden_runtime_imports(path.read_text()))}
    assert not found, f"the runtime imports a lake format or the Kafka client: {found}"
