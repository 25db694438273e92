"""The generated TLS material and client files, without a broker (openssl and keytool only)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from laminar_kafka.devstack.security import (
    ScramUser,
    client_toml,
    generate_material,
    salted_password,
    scram_format_arguments,
    write_client_toml,
)

pytestmark = pytest.mark.integration


def test_material_chains_to_its_ca_and_hides_its_secrets(tmp_path: Path) -> None:
    material = generate_material(tmp_path / "tls")
    ca = str(material.ca_cert)
    for certificate in (material.client_cert, material.directory / "broker.pem"):
        assert subprocess.run(["openssl", "verify", "-CAfile", ca, str(certificate)], capture_output=True).returncode == 0
    rogue = subprocess.run(["openssl", "verify", "-CAfile", ca, str(material.untrusted_client_cert)], capture_output=True)
    assert rogue.returncode != 0
    san = subprocess.run(["openssl", "x509", "-in", str(material.directory / "broker.pem"), "-noout", "-ext",
                          "subjectAltName"], capture_output=True, text=True, check=True).stdout
    assert "DNS:localhost" in san and "IP Address:127.0.0.1" in san
    # the client key is encrypted with its password
    assert b"ENCRYPTED PRIVATE KEY" in material.client_key.read_bytes()
    opened = subprocess.run(["openssl", "pkey", "-in", str(material.client_key), "-passin", "pass:wrong", "-noout"],
                            capture_output=True)
    assert opened.returncode != 0
    # private, and no secret in a repr
    assert stat.S_IMODE(material.directory.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in material.directory.iterdir())
    assert len(set(material.secrets)) == 3
    assert not any(secret in repr(material) for secret in material.secrets)
    # a second generation shares no secret and no CA
    other = generate_material(tmp_path / "tls2")
    assert not set(other.secrets) & set(material.secrets)
    assert other.ca_cert.read_bytes() != material.ca_cert.read_bytes()


def test_scram_credential_is_salted_never_the_password() -> None:
    user = ScramUser("alice", "s3cret-pass")
    salt = b"0123456789abcdef"
    (flag, value) = scram_format_arguments(user, salt)
    assert flag == "--add-scram" and "s3cret-pass" not in value and value.startswith("SCRAM-SHA-512=[name=alice,")
    expected = hashlib.pbkdf2_hmac("sha512", b"s3cret-pass", salt, 8192)
    assert salted_password("s3cret-pass", salt) == expected
    assert f'saltedpassword="{base64.b64encode(expected).decode()}"' in value
    assert hmac.compare_digest(base64.b64decode(value.split('salt="')[1].split('"')[0]), salt)
    assert "s3cret-pass" not in repr(user)


def test_client_toml_round_trips_and_the_screen_version_hides_secrets(tmp_path: Path) -> None:
    properties = {"security.protocol": "SASL_SSL", "sasl.username": "alice", "sasl.password": 'p"w\\d'}
    path = write_client_toml(tmp_path / "client.toml", properties, bootstrap="127.0.0.1:9093", comment="two\nlines")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {"bootstrap": "127.0.0.1:9093", "kafka": properties}
    screen = client_toml(properties, bootstrap="127.0.0.1:9093", hide_secrets=True)
    assert 'p"w' not in screen and "p\\\"w" not in screen
    assert tomllib.loads(screen) == {"bootstrap": "127.0.0.1:9093",
                                     "kafka": {"security.protocol": "SASL_SSL", "sasl.username": "alice"}}
