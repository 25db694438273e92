"""ZkCredentials: parsing, a repr that hides the password, the kazoo auth data and ACLs; the
CoordinatorConfig field; the pure helpers of laminar_kafka.coordinator.zk.auth."""
from __future__ import annotations

import base64
import hashlib
import logging

import pytest

from laminar_kafka.coordinator.config import CoordinatorConfig, ZkCredentials
from laminar_kafka.coordinator.errors import AccessDeniedError, CoordinatorError
from laminar_kafka.coordinator.zk.auth import access_denied, open_client, parent_paths
from laminar_kafka.errors import ConfigurationError

SECRET = "s3cr:et-Pa55"


def test_parse_splits_at_the_first_colon() -> None:
    credentials = ZkCredentials.parse(f"laminar:{SECRET}")
    assert credentials == ZkCredentials("laminar", SECRET)
    assert credentials.user == "laminar" and credentials.password == SECRET


@pytest.mark.parametrize("text", ["", "laminar", "laminar:", f":{SECRET}", ":"])
def test_parse_rejects_a_missing_part_without_echoing_the_text(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ZkCredentials.parse(text)
    assert "user:password" in str(info.value)
    if text.partition(":")[2]:
        assert text.partition(":")[2] not in str(info.value)


@pytest.mark.parametrize("user, password", [("", SECRET), ("a:b", SECRET), ("laminar", "")])
def test_construction_validates_without_showing_the_password(user: str, password: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ZkCredentials(user, password)
    assert SECRET not in str(info.value)


def test_repr_and_str_hide_the_password() -> None:
    credentials = ZkCredentials.parse(f"laminar:{SECRET}")
    for text in (repr(credentials), str(credentials), f"{credentials}", f"{credentials!r}"):
        assert SECRET not in text
        assert "laminar" in text
    config = CoordinatorConfig("p", hosts="zk:2181", credentials=credentials)
    assert SECRET not in repr(config) and SECRET not in str(config)
    assert "ZkCredentials(user='laminar', password='***')" in repr(config)


def test_kazoo_auth_data_is_one_digest_identity() -> None:
    assert ZkCredentials("laminar", SECRET).kazoo_auth_data() == [("digest", f"laminar:{SECRET}")]


def _digest_id(user: str, password: str) -> str:
    hashed = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()
    return f"{user}:{hashed}"


def test_acl_gives_every_permission_to_the_user_only() -> None:
    acl = ZkCredentials("laminar", SECRET).acl()
    assert len(acl) == 1
    assert acl[0].id.scheme == "digest"
    assert acl[0].id.id == _digest_id("laminar", SECRET)
    assert acl[0].perms == 31  # READ | WRITE | CREATE | DELETE | ADMIN
    assert SECRET not in repr(acl)


def test_parent_acl_lets_anyone_list_and_create_siblings_but_nothing_else() -> None:
    owner, world = ZkCredentials("laminar", SECRET).parent_acl()
    assert owner.id.id == _digest_id("laminar", SECRET) and owner.perms == 31
    assert (world.id.scheme, world.id.id) == ("world", "anyone")
    assert sorted(world.acl_list) == ["CREATE", "READ"]


def test_the_config_field_is_optional_and_checked() -> None:
    assert CoordinatorConfig("p").credentials is None
    assert CoordinatorConfig("p", "zk:2181", 5.0).credentials is None  # positional use unchanged
    credentials = ZkCredentials("laminar", SECRET)
    assert CoordinatorConfig("p", credentials=credentials).credentials is credentials
    with pytest.raises(ConfigurationError):
        CoordinatorConfig("p", credentials=f"laminar:{SECRET}")  # type: ignore[arg-type]


def test_parent_paths_are_the_ancestors_outermost_first() -> None:
    assert parent_paths("/laminar/p") == ["/laminar"]
    assert parent_paths("/a/b/c") == ["/a", "/a/b"]
    assert parent_paths("/p") == []


def test_access_denied_names_the_path_and_is_a_coordinator_error() -> None:
    error = access_denied("/laminar/p")
    assert isinstance(error, AccessDeniedError)
    assert isinstance(error, ConfigurationError) and isinstance(error, CoordinatorError)
    assert str(error) == "ZooKeeper denied access to /laminar/p: credentials missing or wrong"


def test_open_client_authenticates_and_creates_with_the_acl_only_with_credentials() -> None:
    credentials = ZkCredentials("laminar", SECRET)
    secured = open_client("127.0.0.1:1", 1.0, credentials, read_only=True)
    plain = open_client("127.0.0.1:1", 1.0)
    try:
        assert secured.auth_data == {("digest", f"laminar:{SECRET}")}
        assert secured.default_acl == credentials.acl()
        assert secured.read_only
        assert plain.auth_data == set() and plain.default_acl is None
    finally:
        secured.close()
        plain.close()


def test_kazoo_debug_lines_never_carry_the_password() -> None:
    from kazoo.protocol.serialization import Auth

    from laminar_kafka.coordinator.zk.auth import RedactAuthPackets

    record = logging.LogRecord("kazoo.client", logging.DEBUG, __file__, 1, "Sending request(xid=%s): %s",
                               (-4, Auth(0, "digest", f"laminar:{SECRET}")), None)
    assert RedactAuthPackets().filter(record)
    assert SECRET not in record.getMessage()
    assert "scheme='digest'" in record.getMessage()
    open_client("127.0.0.1:1", 1.0, ZkCredentials("laminar", SECRET)).close()
    assert any(isinstance(f, RedactAuthPackets) for f in logging.getLogger("kazoo.client").filters)
