from __future__ import annotations

import pytest

import laminar_kafka.coordinator as coordinator
from laminar_kafka.coordinator.errors import (
    AccessDeniedError,
    CoordinatorError,
    FencedError,
    PlacementError,
    RegistryError,
    RoundError,
    RoutingError,
    SessionLostError,
)
from laminar_kafka.errors import ConfigurationError, LaminarError

SUBCLASSES = [
    RegistryError,
    RoutingError,
    PlacementError,
    RoundError,
    FencedError,
    SessionLostError,
    AccessDeniedError,
]


@pytest.mark.parametrize("cls", SUBCLASSES)
def test_every_error_derives_from_the_root(cls: type[CoordinatorError]) -> None:
    assert issubclass(cls, CoordinatorError)
    err = cls("boom")
    assert str(err) == "boom"
    assert err.message == "boom"
    assert err.cause is None


def test_a_bad_setting_is_the_distribution_s_configuration_error() -> None:
    """Re-exported here, the one class: not a CoordinatorError (a caller catching the package's
    failures does not swallow a bad setting); AccessDeniedError is both."""
    assert coordinator.ConfigurationError is ConfigurationError
    assert issubclass(CoordinatorError, LaminarError) and not issubclass(ConfigurationError, CoordinatorError)
    assert issubclass(AccessDeniedError, ConfigurationError)


def test_cause_is_kept_and_chained() -> None:
    underlying = OSError("disk gone")
    err = FencedError("write rejected", cause=underlying)
    assert err.cause is underlying
    assert err.__cause__ is underlying


def test_raise_from_keeps_explicit_chain() -> None:
    underlying = ValueError("inner")
    with pytest.raises(SessionLostError) as info:
        try:
            raise underlying
        except ValueError as exc:
            raise SessionLostError("lost", cause=exc) from exc
    assert info.value.cause is underlying
    assert info.value.__cause__ is underlying


def test_package_reexports_every_public_name() -> None:
    for name in coordinator.__all__:
        assert hasattr(coordinator, name), name
    assert coordinator.CoordinatorError is CoordinatorError
