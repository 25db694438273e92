"""``node-id auto``, the pure rules: host name -> ordinal -> id, the plan, identities, the state file,
the setting in flags, file and environment, the claim records. No servers."""
from __future__ import annotations

import itertools
import json
import string
from pathlib import Path

import pytest

from laminar_kafka.cli.main import build_parser
from laminar_kafka.cluster.config import load_settings, settings_from
from laminar_kafka.cluster.node_identity import (
    EMBEDDED_NODE_ID,
    NodeIdChoice,
    NodeIdPlan,
    NodeIdScheme,
    StateFile,
    host_identity,
    host_label,
    host_ordinal,
    ordinal_node_id,
    plan_node_id,
    state_file_name,
    token_identity,
)
from laminar_kafka.coordinator import layout
from laminar_kafka.coordinator.errors import CodecError
from laminar_kafka.errors import ConfigurationError

BASE = {"bootstrap": "k:9092", "topic": "orders", "output": "/tmp/out"}


# ---- host name -> ordinal ------------------------------------------------------------------------

@pytest.mark.parametrize("host, ordinal", [
    # a Kubernetes StatefulSet's pods: ordinals from 0
    ("lake-0", 0), ("lake-1", 1), ("lake-9", 9), ("lake-10", 10), ("lake-9999", 9999),
    ("laminar-lake-3", 3), ("a-0", 0), ("x1-2", 2), ("node7-4", 4), ("a_b-5", 5),
    # the first DNS label counts, in any case; an FQDN's trailing dot too
    ("lake-2.lake.default.svc.cluster.local", 2), ("LAKE-2", 2), ("Lake-2.Example.COM.", 2), ("  lake-2\n", 2),
    # a compose replica named as its container
    ("proj-node-1", 1), ("proj_node-12", 12),
])
def test_a_host_name_ending_in_dash_digits_has_that_ordinal(host: str, ordinal: int) -> None:
    assert host_ordinal(host) == ordinal


@pytest.mark.parametrize("host", [
    "", "vm", "localhost", "lake", "lake0", "worker7", "lake-", "-", "-1", "--1", "lake--1",
    "node-01", "node-00", "node-007",          # a leading zero: not an ordinal
    "lake-12345", "web-5d8c7b9f4d-24567",      # five digits: a Deployment pod's random suffix
    "web-5d8c7b9f4d-x2k4z", "lake-a", "lake-1a", "lake-+1", "lake- 1", "lake-١",  # not decimal ASCII digits
    "ip-10-0-0-12", "ip-10-0-0-12.ec2.internal",  # EC2: an address, not an ordinal
    "10-1", "2023-1", "node-2023-1",           # the label before is digits only
    "lake.0", "lake-0x", "lake-.1",            # the first DNS label has no -<n> at its end
])
def test_other_host_names_have_no_ordinal(host: str) -> None:
    assert host_ordinal(host) is None


def test_the_ordinal_rule_over_every_short_name() -> None:
    """Exhaustive over every name of up to 4 characters from a small alphabet: the ordinal is
    exactly the rule of the docstring, and distinct names with an ordinal give distinct ids unless
    their ordinals are equal."""
    alphabet = "a0-1"
    for length in range(0, 5):
        for chars in itertools.product(alphabet, repeat=length):
            host = "".join(chars)
            name, dash, digits = host.rpartition("-")
            previous = name.rpartition("-")[2]
            expected = (int(digits) if dash and name and not name.endswith("-") and digits
                        and all(c in string.digits for c in digits) and len(digits) <= 4
                        and (digits == "0" or not digits.startswith("0"))
                        and not (previous and all(c in string.digits for c in previous)) else None)
            assert host_ordinal(host) == expected, host


def test_the_id_is_the_ordinal_plus_one() -> None:
    assert [ordinal_node_id(n) for n in range(4)] == [1, 2, 3, 4]
    ids = {ordinal_node_id(host_ordinal(f"lake-{n}") or 0) for n in range(10000)}
    assert len(ids) == 10000 and min(ids) == 1  # injective, every id >= 1
    with pytest.raises(ValueError):
        ordinal_node_id(-1)


def test_host_label() -> None:
    assert host_label(" Lake-2.svc.local ") == "lake-2"
    assert host_label("vm") == "vm"


# ---- the plan -----------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["lake-3", "vm", "ip-10-0-0-12"])
def test_embedded_mode_is_always_node_1(host: str) -> None:
    plan = plan_node_id(host, embedded=True)
    assert plan == NodeIdPlan(NodeIdScheme.EMBEDDED, host, EMBEDDED_NODE_ID) and plan.node_id == 1
    assert plan.describe() == "embedded mode has one node"


def test_zookeeper_mode_takes_the_ordinal_or_allocates() -> None:
    assert plan_node_id("lake-0", embedded=False) == NodeIdPlan(NodeIdScheme.ORDINAL, "lake-0", 1, 0)
    assert plan_node_id("proj-node-2", embedded=False) == NodeIdPlan(NodeIdScheme.ORDINAL, "proj-node-2", 3, 2)
    assert plan_node_id("lake-0", embedded=False).describe() == "host name lake-0 has ordinal 0: id = ordinal + 1"
    allocated = plan_node_id("vm", embedded=False)
    assert allocated == NodeIdPlan(NodeIdScheme.ALLOCATED, "vm") and allocated.node_id is None
    assert allocated.describe() == "host name vm has no ordinal"


# ---- identities ---------------------------------------------------------------------------------

def test_identities_are_znode_names() -> None:
    assert host_identity("Lake-2.Example.com.") == "host:lake-2.example.com"
    assert host_identity(" vm ") == "host:vm"
    token = "0123456789abcdef0123456789abcdef"
    assert token_identity(token) == f"dir:{token}"
    for identity in (host_identity("vm"), token_identity(token), host_identity("a" * 253)):
        assert layout.is_node_identity(identity)
        assert layout.node_identity_path(identity) == f"node-ids/identities/{identity}"
    for bad in ("", "  ", ".", "-vm", "host/evil", "ünï", "a" * 254, "with space"):
        with pytest.raises(ConfigurationError, match="cannot identify this node"):
            host_identity(bad)
    for bad_token in ("", "xyz", token.upper(), token + "0"):
        with pytest.raises(ConfigurationError, match="32 hexadecimal"):
            token_identity(bad_token)


@pytest.mark.parametrize("identity", ["", "host", "host:", ":vm", "host:..", "host:.", "host:a/b", "HOST:vm",
                                      "host:VM", "toolongkind:vm", "host:-vm", 7, None])
def test_a_malformed_identity_is_no_znode_name(identity: object) -> None:
    assert not layout.is_node_identity(identity)
    if isinstance(identity, str):
        with pytest.raises(CodecError):
            layout.node_identity_path(identity)


def test_the_claim_records_round_trip_and_decode_strictly() -> None:
    claim = layout.NodeIdClaim("host:vm", "vm")
    raw = layout.node_id_claim_data(claim)
    assert json.loads(raw) == {"identity": "host:vm", "host": "vm"}
    assert layout.parse_node_id_claim(3, raw) == claim
    assert layout.node_id_claim_path(3) == "node-ids/ids/3"
    assert layout.parse_node_identity("host:vm", layout.node_identity_data(3)) == 3
    with pytest.raises(CodecError):
        layout.node_id_claim_data(layout.NodeIdClaim("bad identity", "vm"))
    for bad in (b"", b"{}", b'{"identity": "host:vm"}', b'{"identity": "host:vm", "host": 1}',
                b'{"identity": "nope", "host": "vm"}', b'{"identity": "host:vm", "host": "vm", "x": 1}'):
        with pytest.raises(CodecError):
            layout.parse_node_id_claim(3, bad)
    for bad in (b'{"node_id": 0}', b'{"node_id": true}', b'{"node_id": "3"}', b'{"node_id": 1.0}', b"{}", b"[]"):
        with pytest.raises(CodecError):
            layout.parse_node_identity("host:vm", bad)


# ---- the choice and the state file -------------------------------------------------------------

def test_the_choice_says_how_in_one_line() -> None:
    choice = NodeIdChoice(3, NodeIdScheme.ORDINAL, "host name lake-2 has ordinal 2: id = ordinal + 1", "host:lake-2")
    assert choice.log_line() == "node id 3 (node-id auto: host name lake-2 has ordinal 2: id = ordinal + 1)"
    assert choice.origin() == "chosen by --node-id auto: host name lake-2 has ordinal 2: id = ordinal + 1"
    by_host = NodeIdChoice(1, NodeIdScheme.ALLOCATED, "host name vm has no ordinal; claimed", "host:vm")
    assert by_host.origin().endswith("; two nodes on one host need a state-dir each")
    by_file = NodeIdChoice(1, NodeIdScheme.ALLOCATED, "claimed", "dir:" + "0" * 32)
    assert "state-dir each" not in by_file.origin()


def test_the_state_file_round_trips_and_decodes_strictly() -> None:
    identity = "dir:" + "a" * 32
    assert state_file_name("orders") == "node-id-orders.json"
    for state in (StateFile(identity, "orders"), StateFile(identity, "orders", 4)):
        assert StateFile.from_json(state.to_json(), "f") == state
    assert json.loads(StateFile(identity, "p", 2).to_json()) == {"identity": identity, "pipeline": "p", "node_id": 2}
    for bad in (b"", b"not json", b"{}", b'{"identity": "host:vm", "pipeline": "p", "node_id": 1}',
                ('{"identity": "%s", "pipeline": "p", "node_id": 0}' % identity).encode(),
                ('{"identity": "%s", "pipeline": "p", "node_id": "1"}' % identity).encode(),
                ('{"identity": "%s", "pipeline": "p"}' % identity).encode()):
        with pytest.raises(ConfigurationError, match="node-id auto: .*delete the file"):
            StateFile.from_json(bad, "/s/node-id-p.json")


# ---- the setting --------------------------------------------------------------------------------

@pytest.mark.parametrize("file_values, env, flags", [
    ({"node-id": "auto"}, {}, {}),
    ({"node_id": "AUTO"}, {}, {}),
    ({}, {"LAMINAR_NODE_ID": "auto"}, {}),
    ({}, {}, {"node-id": " Auto "}),
    ({"node-id": 3}, {"LAMINAR_NODE_ID": "4"}, {"node-id": "auto"}),  # the flag wins
])
def test_auto_comes_from_the_file_the_environment_or_a_flag(file_values: dict[str, object], env: dict[str, str],
                                                           flags: dict[str, object]) -> None:
    s = settings_from({**BASE, **file_values}, env, flags)
    assert s.node_id_auto and s.node_id == 0
    chosen = s.with_node_id(7)
    assert chosen.node_id == 7 and chosen.node_id_auto and chosen.pipeline == s.pipeline
    assert "node_id_auto=True" in repr(s)


def test_an_explicit_id_later_in_the_order_replaces_auto() -> None:
    s = settings_from({**BASE, "node-id": "auto"}, {"LAMINAR_NODE_ID": "5"}, {})
    assert (s.node_id, s.node_id_auto) == (5, False)
    with pytest.raises(ConfigurationError, match="not auto"):
        s.with_node_id(2)


def test_auto_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('bootstrap = "k:1"\ntopic = "t"\noutput = "/o"\nzk = "z:2181"\nnode-id = "auto"\n')
    s = load_settings(path, {}, {})
    assert s.node_id_auto and not s.embedded


@pytest.mark.parametrize("value, fragment", [
    ("automatic", "not an integer (or auto)"), ("", "not an integer (or auto)"), (True, "not an integer"),
    (0, "node-id must be >= 1"), ("-1", "node-id must be >= 1"),
])
def test_a_bad_node_id_is_one_error_naming_auto(value: object, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        settings_from(BASE, {}, {"node-id": value})


def test_a_chosen_id_is_checked() -> None:
    s = settings_from(BASE, {}, {"node-id": "auto"})
    for bad in (0, -3):
        with pytest.raises(ConfigurationError, match="node-id must be >= 1"):
            s.with_node_id(bad)


def test_run_help_shows_auto(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "or auto: embedded, 1; a host name ending in an ordinal -<n>" in text
    assert "n + 1; otherwise an id claimed in ZooKeeper" in text
    assert parser.parse_args(["run", "--node-id", "auto"]).node_id == "auto"
