"""How a client reaches an S3-compatible server on loopback: one value, :class:`S3Access`.

Both dev object stores (SeaweedFS, :mod:`laminar_kafka.devstack.objectstore.seaweedfs`, and moto,
:mod:`laminar_kafka.devstack.objectstore.moto`) hand one out, so the ``AWS_*`` environment, the pyarrow URI, the
bucket creation and the "does it answer" probe exist once.

- :meth:`S3Access.env`: the ``AWS_*`` variables a child process needs so that pyarrow's
  ``S3FileSystem`` (and boto3, pyiceberg's FileIO) talk to the server: ``s3://bucket/prefix`` then
  works with no query parameters (pyarrow 26's AWS SDK reads ``AWS_ENDPOINT_URL`` when an
  ``S3FileSystem`` is built);
- :meth:`S3Access.uri`: the self-contained pyarrow URI
  ``s3://bucket/prefix?endpoint_override=127.0.0.1:P&scheme=http&region=R`` (credentials still come
  from the environment: pyarrow accepts them in a URI only as ``user:password@``, which would leak
  the secret into logs).

The credentials of the dev servers are fixed development values, not secrets of any real account;
they are still kept out of ``repr``.
"""
from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from laminar_kafka.devstack.errors import ServerStartError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["DEFAULT_REGION", "DEV_ACCESS_KEY_ID", "DEV_SECRET_ACCESS_KEY", "S3Access", "http_status"]

DEFAULT_REGION = "us-east-1"
#: the development credentials of the dev object stores (loopback only)
DEV_ACCESS_KEY_ID = "laminar-dev"
DEV_SECRET_ACCESS_KEY = "laminar-dev-secret"


@dataclass(frozen=True)
class S3Access:
    """The S3 endpoint ``http://127.0.0.1:<port>`` with its region and credentials."""

    port: int
    region: str = DEFAULT_REGION
    access_key_id: str = DEV_ACCESS_KEY_ID
    secret_access_key: str = field(default=DEV_SECRET_ACCESS_KEY, repr=False)

    @property
    def endpoint(self) -> str:
        """The endpoint URL (``http://127.0.0.1:P``) for boto3, ``AWS_ENDPOINT_URL``, pyiceberg's ``s3.endpoint``."""
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment a child process needs to reach this server through the AWS SDKs."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def uri(self, bucket: str, prefix: str = "") -> str:
        """The pyarrow URI of ``bucket/prefix`` on this server (endpoint, scheme and region in the
        query; credentials from :meth:`env`)."""
        path = f"{bucket}/{prefix.strip('/')}" if prefix.strip("/") else bucket
        return (f"s3://{quote(path)}?endpoint_override=127.0.0.1:{self.port}&scheme=http"
                f"&region={self.region}")

    def filesystem(self, *, allow_bucket_creation: bool = False) -> pafs.S3FileSystem:
        """A pyarrow ``S3FileSystem`` on this server with these credentials."""
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(
            access_key=self.access_key_id, secret_key=self.secret_access_key, region=self.region,
            endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
            allow_bucket_creation=allow_bucket_creation,
        )

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (already existing is fine). Raises ServerStartError in one line."""
        import pyarrow as pa
        import pyarrow.fs as pafs

        fs = self.filesystem(allow_bucket_creation=True)
        try:
            if fs.get_file_info(bucket).type != pafs.FileType.Directory:
                fs.create_dir(bucket, recursive=False)
        except (OSError, pa.ArrowException) as exc:
            message = " ".join(str(exc).split())
            raise ServerStartError(f"cannot create bucket {bucket!r} on {self.endpoint}: {message}") from exc

    def answers(self, timeout: float = 2.0) -> bool:
        """Whether the endpoint answers HTTP below 500 (an unsigned ``ListBuckets``: moto answers
        200, a server that checks signatures 403)."""
        status = http_status(f"{self.endpoint}/", timeout)
        return status is not None and status < 500


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of ``GET url`` (None when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError, ValueError):
        return None
