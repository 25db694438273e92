"""One exception root for the distribution, read from every module: each exception class defined in
laminar_kafka.* descends from LaminarError, there is one ConfigurationError, and no module imports
it (or the name ConfigError) under another name."""
from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import pytest

from laminar_kafka.errors import ConfigurationError, LaminarError
from tests.unit.test_layering import FILES, NS

#: modules not imported by the walk: the console entry point runs the command line when imported
NOT_IMPORTED = {f"{NS}.__main__"}


def _modules() -> dict[str, types.ModuleType]:
    return {name: importlib.import_module(name) for name in sorted(FILES) if name not in NOT_IMPORTED}


def _exception_classes(modules: dict[str, types.ModuleType]) -> dict[str, type[BaseException]]:
    """Every exception class by its qualified name, taken from the module that defines it."""
    found: dict[str, type[BaseException]] = {}
    for name, module in modules.items():
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return found


def _outside_the_tree(classes: dict[str, type[BaseException]]) -> list[str]:
    return sorted(name for name, cls in classes.items() if not issubclass(cls, LaminarError))


@pytest.fixture(scope="module")
def classes() -> dict[str, type[BaseException]]:
    return _exception_classes(_modules())


def test_the_walk_sees_every_package_root(classes: dict[str, type[BaseException]]) -> None:
    roots = {"coordinator.errors.CoordinatorError", "connector.errors.ConnectorError", "cluster.errors.ClusterError",
             "devstack.errors.DevStackError", "testing.servers.ServersUnavailable", "errors.LaminarError"}
    assert {f"{NS}.{root}" for root in roots} <= set(classes)
    assert len(classes) > 50


def test_every_exception_class_descends_from_laminar_error(classes: dict[str, type[BaseException]]) -> None:
    assert _outside_the_tree(classes) == []


def test_the_check_finds_a_class_outside_the_tree() -> None:
    module = types.ModuleType("laminar_kafka.fake")
    exec("class Stray(ValueError):\n    pass\nclass Kept(LaminarError):\n    pass\n",
         {"__name__": module.__name__, "LaminarError": LaminarError}, vars(module))
    assert _outside_the_tree(_exception_classes({module.__name__: module})) == ["laminar_kafka.fake.Stray"]


def test_each_package_root_hangs_from_laminar_error_directly(classes: dict[str, type[BaseException]]) -> None:
    """Beneath LaminarError, one root per package: no package root derives from another's."""
    tops = {name for name, cls in classes.items() if cls is not LaminarError and LaminarError in cls.__bases__}
    assert {f"{NS}.{name}" for name in ("coordinator.errors.CoordinatorError", "connector.errors.ConnectorError",
                                        "cluster.errors.ClusterError", "devstack.errors.DevStackError",
                                        "testing.servers.ServersUnavailable", "errors.ConfigurationError")} <= tops


def test_there_is_exactly_one_configuration_error(classes: dict[str, type[BaseException]]) -> None:
    defined = [name for name in classes if name.rpartition(".")[2] == "ConfigurationError"]
    assert defined == [f"{NS}.errors.ConfigurationError"]
    bound = {name: vars(module)["ConfigurationError"] for name, module in _modules().items()
             if "ConfigurationError" in vars(module)}
    assert len(bound) > 30 and all(cls is ConfigurationError for cls in bound.values()), bound
    assert issubclass(ConfigurationError, LaminarError)


def _imported_names(path: Path) -> list[tuple[str, str | None]]:
    return [(alias.name, alias.asname) for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.ImportFrom) for alias in node.names]


def test_no_module_imports_a_configuration_error_under_another_name() -> None:
    aliased = [f"{name}: {imported} as {alias}" for name, path in FILES.items()
               for imported, alias in _imported_names(path)
               if imported in ("ConfigurationError", "ConfigError") and alias not in (None, imported)]
    assert aliased == []
    assert not [name for name, path in FILES.items() if "ConfigError" in
                {n for n, _ in _imported_names(path)}], "ConfigError is gone: use ConfigurationError"

