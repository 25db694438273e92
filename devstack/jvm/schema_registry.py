"""A Confluent-compatible schema registry as a local JVM process, for the dev stack and the tests.

The server is Apicurio Registry (pinned by `registry-pom.xml` beside this module) with in-memory
storage; its Confluent-compatible API lives under ``/apis/ccompat/v7``, which is the URL to give
`confluent_kafka.schema_registry.SchemaRegistryClient` (`SchemaRegistryServer.url`). Everything it
stores is lost when the process stops.

`ensure_registry_build` runs Maven once (Maven Central only) to resolve the application and package
it with the Quarkus build plugin into the cache (``$LAMINAR_CACHE_DIR``, else
``~/.cache/laminar-kafka``); later calls find the completed directory and return at once.
`new_schema_registry` makes a server on a free loopback port; `start` waits until
``GET <url>/subjects`` answers.

Run ``python -m laminar_kafka.devstack.jvm.schema_registry`` to start one in the foreground (Ctrl-C stops it).
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from laminar_kafka.devstack.errors import ArtifactError
from laminar_kafka.devstack.jvm.artifacts import cached_maven_build, default_cache_dir
from laminar_kafka.devstack.jvm.servers import JvmServer
from laminar_kafka.devstack.jvm.services import (
    SMALL_JVM_OPTIONS,
    HttpJvmService,
    answers_json,
    pom_property,
    run_in_foreground,
)
from laminar_kafka.devstack.processes import free_port

logger = logging.getLogger(__name__)

__all__ = [
    "CCOMPAT_PATH", "REGISTRY_POM_PATH", "SchemaRegistryServer", "ensure_registry_build", "new_schema_registry",
    "pinned_registry_version", "registry_answers",
]

REGISTRY_POM_PATH = Path(__file__).with_name("registry-pom.xml")
CCOMPAT_PATH = "/apis/ccompat/v7"
QUARKUS_MAIN_CLASS = "io.quarkus.bootstrap.runner.QuarkusEntryPoint"
_RUN_JAR = Path("quarkus-app") / "quarkus-run.jar"

# Apicurio's POMs name extra repositories (some unreachable from here); every artifact the build
# needs is on Maven Central, so all of them are mirrored to it. Passed as the *global* settings, so
# a user's own ~/.m2/settings.xml (a corporate mirror, a proxy) still applies on top.
_CENTRAL_ONLY_SETTINGS = """\
<settings>
  <mirrors>
    <mirror>
      <id>laminar-central-only</id>
      <mirrorOf>*</mirrorOf>
      <url>https://repo.maven.apache.org/maven2</url>
    </mirror>
  </mirrors>
</settings>
"""



def pinned_registry_version(pom_path: Path = REGISTRY_POM_PATH) -> str:
    """The Apicurio Registry version pinned in the POM."""
    return pom_property(pom_path, "apicurio.version")


def ensure_registry_build(cache_dir: Path | None = None) -> Path:
    """Build the pinned registry application into the cache once; return its directory.

    The directory holds ``quarkus-app/quarkus-run.jar`` (with its ``lib/``). The first call runs
    Maven (about 200 MB of downloads and a minute on a cold Maven cache); later calls return at once
    (see :func:`laminar_kafka.devstack.jvm.artifacts.cached_maven_build`). Raises ToolMissingError without Java or
    Maven, ArtifactError when the build fails (with the tail of Maven's output).
    """
    cache = cache_dir or default_cache_dir()
    version = pinned_registry_version()

    def maven_args(staging: Path) -> list[str]:
        settings = staging / "maven-global-settings.xml"  # every repository is Maven Central
        settings.write_text(_CENTRAL_ONLY_SETTINGS)
        return ["-gs", str(settings), "-f", str(REGISTRY_POM_PATH), "package", "-DskipTests",
                "-Dquarkus.package.type=fast-jar", f"-Dregistry.build.dir={staging / 'target'}"]

    def built_in(staging: Path) -> Path:
        if not (staging / "target" / _RUN_JAR).is_file():
            raise ArtifactError(f"the schema registry build (Apicurio {version}) produced no {_RUN_JAR}")
        return staging / "target"

    return cached_maven_build(cache / f"schema-registry-apicurio-{version}", f"apicurio={version}\n",
                              f"build the schema registry (Apicurio {version})", maven_args, built_in)


def registry_answers(url: str, timeout: float = 2.0) -> bool:
    """Whether the Confluent-compatible API at `url` lists its subjects (HTTP 200 with a JSON list)."""
    return answers_json(f"{url}/subjects", list, timeout)


@dataclass
class SchemaRegistryServer(HttpJvmService):
    """One registry process on a loopback port.

    `url` is the Confluent-compatible base URL (for ``SchemaRegistryClient({"url": ...})``); the
    process's output goes to ``<workdir>/server.log``. Stopping it discards every schema.
    """

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}{CCOMPAT_PATH}"


def new_schema_registry(base_dir: Path, *, cache_dir: Path | None = None, port: int | None = None) -> SchemaRegistryServer:
    """A registry server (not started) working in `base_dir`, on `port` or a free loopback port.

    Builds the application into the cache first when needed (see `ensure_registry_build`).
    """
    build_dir = ensure_registry_build(cache_dir)
    workdir = base_dir / "schema-registry"
    workdir.mkdir(parents=True, exist_ok=True)
    chosen_port = port or free_port()
    url = f"http://127.0.0.1:{chosen_port}{CCOMPAT_PATH}"
    server = JvmServer(
        name="schema-registry",
        main_class=QUARKUS_MAIN_CLASS,
        args=[],
        workdir=workdir,
        classpath=str(build_dir / _RUN_JAR),
        port=chosen_port,
        health=lambda: registry_answers(url),
        jvm_options=[
            *SMALL_JVM_OPTIONS,
            f"-Dquarkus.http.port={chosen_port}",
            "-Dquarkus.http.host=127.0.0.1",
            # Apicurio warns at every start that no Sentry DSN is configured, and audits every request
            "-Dquarkus.log.category.\"io.sentry\".level=ERROR",
            "-Dquarkus.log.category.\"io.apicurio.common.apps.logging.audit\".level=WARN",
        ],
    )
    return SchemaRegistryServer(server)


def main() -> None:
    """Start a registry in the foreground on a free port, print its URL, stop it on Ctrl-C."""
    base_dir = Path(tempfile.mkdtemp(prefix="laminar-registry-"))
    registry = new_schema_registry(base_dir)
    run_in_foreground(registry, f"schema registry: {registry.url}", base_dir)


if __name__ == "__main__":
    main()
