"""Locally generated TLS material and SCRAM users for a secured dev Kafka, and the settings that use them.

`generate_material(directory)` writes, with `openssl` and the JDK's `keytool`:

- a CA (key + certificate) that signs everything else;
- the broker's key and certificate (SAN: DNS localhost, IP 127.0.0.1) in a PKCS12 keystore, and a
  PKCS12 truststore holding the CA (the broker verifies mTLS clients with it);
- a client key (PEM, encrypted with `client_key_password`) and certificate signed by the CA, for mTLS;
- a second, untrusted CA and a client certificate it signed, for negative tests.

Every password is random per call; nothing is cached in the repository. The directory is mode 0700,
secret files 0600. Passwords reach `openssl` and `keytool` through environment variables, never a
command line; the SCRAM users reach the broker's storage as salted passwords (RFC 5802), never in clear.

The pure functions below turn a `SecurityMaterial` into broker properties (`broker_properties`),
`kafka-storage format` arguments (`scram_format_arguments`), librdkafka client properties
(`sasl_ssl_client_properties`, `mtls_client_properties`) and a client TOML file (`write_client_toml`).
"""
from __future__ import annotations

import base64
import hashlib
import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.devstack.errors import DevStackError
from laminar_kafka.devstack.jvm.artifacts import require_tool
from laminar_kafka.devstack.jvm.java import java_tool

__all__ = [
    "SCRAM_MECHANISM", "ScramUser", "SecurityMaterial", "broker_properties", "generate_material",
    "mtls_client_properties", "sasl_ssl_client_properties", "scram_format_arguments", "write_client_toml",
]

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
CERT_DAYS = 30
OPENSSL_HINT = "install OpenSSL (Debian/Ubuntu: apt-get install openssl)"

_CA_EXTENSIONS = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
_BROKER_EXTENSIONS = (
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
)
_CLIENT_EXTENSIONS = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"


@dataclass(frozen=True)
class ScramUser:
    """A SCRAM-SHA-512 user of the secured broker. The `repr` hides the password."""

    name: str
    password: str

    def __repr__(self) -> str:
        return f"ScramUser(name={self.name!r}, password='***')"


@dataclass(frozen=True)
class SecurityMaterial:
    """Paths and passwords of one generated set of TLS material and SCRAM users (see the module doc).

    PEM files are for librdkafka (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`);
    the PKCS12 stores are for the broker. The `repr` hides every password.
    """

    directory: Path
    ca_cert: Path
    broker_keystore: Path
    broker_truststore: Path
    store_password: str
    client_cert: Path
    client_key: Path
    client_key_password: str
    untrusted_ca_cert: Path
    untrusted_client_cert: Path
    untrusted_client_key: Path
    user: ScramUser

    def __repr__(self) -> str:
        return f"SecurityMaterial(directory={str(self.directory)!r}, user={self.user.name!r}, passwords='***')"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret value (what a leak check must never find in logs, status or outputs)."""
        return (self.store_password, self.client_key_password, self.user.password)


def _password() -> str:
    return secrets.token_urlsafe(24)


class _Tools:
    """Runs `openssl` / `keytool` with the passwords in environment variables only."""

    def __init__(self, directory: Path, passwords: dict[str, str]) -> None:
        self.directory = directory
        self.env = {**os.environ, **passwords}
        self.openssl = require_tool("openssl", OPENSSL_HINT)
        self.keytool = java_tool("keytool")  # the keytool of the Java that runs the brokers

    def run(self, *argv: str) -> None:
        result = subprocess.run(list(argv), cwd=self.directory, env=self.env, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=120)
        if result.returncode != 0:
            tool = Path(argv[0]).name
            detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise DevStackError(f"generating TLS material failed ({tool} {argv[1]}): {' / '.join(detail)}")

    def extensions(self, name: str, text: str) -> str:
        (self.directory / name).write_text(text)
        return name

    def ca(self, stem: str, subject: str) -> None:
        self.run(self.openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{stem}.key",
                 "-out", f"{stem}.pem", "-days", str(CERT_DAYS), "-subj", subject, "-sha256",
                 "-extensions", "v3_ca", "-config", self.extensions(f"{stem}.cnf", _request_config(_CA_EXTENSIONS)))

    def signed(self, stem: str, subject: str, ca: str, extensions: str, key_password_env: str | None) -> None:
        """A key (encrypted PEM when `key_password_env`) and a certificate for it signed by `ca`."""
        self.run(self.openssl, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", f"{stem}.plain.key")
        self.run(self.openssl, "req", "-new", "-key", f"{stem}.plain.key", "-out", f"{stem}.csr", "-subj", subject)
        self.run(self.openssl, "x509", "-req", "-in", f"{stem}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-out", f"{stem}.pem", "-days", str(CERT_DAYS), "-sha256",
                 "-extfile", self.extensions(f"{stem}.ext", extensions))
        if key_password_env is not None:
            self.run(self.openssl, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", f"{stem}.plain.key",
                     "-out", f"{stem}.key", "-passout", f"env:{key_password_env}")
            (self.directory / f"{stem}.plain.key").unlink()
        else:
            (self.directory / f"{stem}.plain.key").rename(self.directory / f"{stem}.key")


def _request_config(extensions: str) -> str:
    return f"[req]\ndistinguished_name=dn\n[dn]\n[v3_ca]\n{extensions}"


def generate_material(directory: Path, user_name: str = "alice") -> SecurityMaterial:
    """Generate a fresh CA, broker and client certificates, an untrusted CA and a SCRAM user into
    `directory` (created, mode 0700). Raises `ToolMissingError` without openssl or keytool and
    `DevStackError` (naming the step, never a password) when a tool fails."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    store_password, key_password = _password(), _password()
    tools = _Tools(directory, {"LAMINAR_TLS_STORE_PASSWORD": store_password, "LAMINAR_TLS_KEY_PASSWORD": key_password})
    tools.ca("ca", "/CN=laminar-dev-ca")
    tools.signed("broker", "/CN=localhost", "ca", _BROKER_EXTENSIONS, key_password_env=None)
    tools.signed("client", "/CN=laminar-client", "ca", _CLIENT_EXTENSIONS, key_password_env="LAMINAR_TLS_KEY_PASSWORD")
    tools.ca("untrusted-ca", "/CN=laminar-untrusted-ca")
    tools.signed("untrusted-client", "/CN=laminar-intruder", "untrusted-ca", _CLIENT_EXTENSIONS,
                 key_password_env="LAMINAR_TLS_KEY_PASSWORD")
    tools.run(tools.openssl, "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
              "-name", "broker", "-out", "broker.keystore.p12", "-passout", "env:LAMINAR_TLS_STORE_PASSWORD")
    tools.run(tools.keytool, "-importcert", "-noprompt", "-alias", "laminar-dev-ca", "-file", "ca.pem",
              "-keystore", "broker.truststore.p12", "-storetype", "PKCS12",
              "-storepass:env", "LAMINAR_TLS_STORE_PASSWORD")
    for path in directory.iterdir():
        path.chmod(0o600)
    return SecurityMaterial(
        directory=directory,
        ca_cert=directory / "ca.pem",
        broker_keystore=directory / "broker.keystore.p12",
        broker_truststore=directory / "broker.truststore.p12",
        store_password=store_password,
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        client_key_password=key_password,
        untrusted_ca_cert=directory / "untrusted-ca.pem",
        untrusted_client_cert=directory / "untrusted-client.pem",
        untrusted_client_key=directory / "untrusted-client.key",
        user=ScramUser(user_name, _password()),
    )


# ---- pure: what the broker and the clients are configured with ----


def salted_password(password: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> bytes:
    """RFC 5802 `Hi(password, salt, i)` for SCRAM-SHA-512 (what the broker stores, not the password)."""
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)


def scram_format_arguments(user: ScramUser, salt: bytes | None = None) -> list[str]:
    """The `kafka-storage format` arguments that create `user` at format time (KRaft), as a salted
    password: the clear password never appears on a command line."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = base64.b64encode(salted_password(user.password, salt)).decode()
    return ["--add-scram", (f"{SCRAM_MECHANISM}=[name={user.name},iterations={SCRAM_ITERATIONS},"
                            f"salt=\"{base64.b64encode(salt).decode()}\",saltedpassword=\"{salted}\"]")]


def broker_properties(material: SecurityMaterial) -> dict[str, object]:
    """The server.properties entries for a broker's `SASL_SSL` listener (SCRAM-SHA-512, server-side
    TLS) and its `SSL` listener, which requires a client certificate (mTLS). The caller declares the
    two listeners (names `SASL_SSL` and `SSL`) in `listeners` and the protocol map."""
    return {
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": material.broker_keystore,
        "ssl.keystore.password": material.store_password,
        "ssl.key.password": material.store_password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": material.broker_truststore,
        "ssl.truststore.password": material.store_password,
    }


def sasl_ssl_client_properties(material: SecurityMaterial, *, ca_cert: Path | None = None,
                               password: str | None = None) -> dict[str, str]:
    """librdkafka properties of a SASL_SSL SCRAM-SHA-512 client (`ca_cert`/`password` override the
    generated ones, for negative tests)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": material.user.name,
        "sasl.password": material.user.password if password is None else password,
        "ssl.ca.location": str(ca_cert or material.ca_cert),
    }


def mtls_client_properties(material: SecurityMaterial, *, ca_cert: Path | None = None,
                           certificate: Path | None = None, key: Path | None = None) -> dict[str, str]:
    """librdkafka properties of an mTLS (security.protocol=SSL) client with the generated client
    certificate (overrides for negative tests)."""
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca_cert or material.ca_cert),
        "ssl.certificate.location": str(certificate or material.client_cert),
        "ssl.key.location": str(key or material.client_key),
        "ssl.key.password": material.client_key_password,
    }


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def client_toml(properties: dict[str, str], *, bootstrap: str = "", comment: str = "",
                hide_secrets: bool = False) -> str:
    """A TOML document: `bootstrap` (when given) and the `[kafka]` table of `properties`, as
    `laminar-kafka run|status|verify --config` read it. With `hide_secrets`, secret values are
    left out and a comment says so (what a screen may show)."""
    from laminar_kafka.kafka_source.clients import is_secret_key

    lines = [f"# {line}" for line in comment.splitlines()]
    if bootstrap:
        lines.append(f"bootstrap = {_toml_string(bootstrap)}")
    lines.append("[kafka]")
    for key, value in properties.items():
        if hide_secrets and is_secret_key(key):
            lines.append(f"# {_toml_string(key)} = (secret: only in the file)")
        else:
            lines.append(f"{_toml_string(key)} = {_toml_string(value)}")
    return "\n".join(lines) + "\n"


def write_client_toml(path: Path, properties: dict[str, str], *, bootstrap: str = "", comment: str = "") -> Path:
    """Write `client_toml(properties, bootstrap=...)` to `path`, created mode 0600 (it holds secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(client_toml(properties, bootstrap=bootstrap, comment=comment))
    path.chmod(0o600)
    return path
