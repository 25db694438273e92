"""ZooKeeper sessions and the access control of a pipeline's subtree (digest ACLs), through kazoo.

Without credentials nothing changes: nodes get ZooKeeper's open ACL. With
:class:`~laminar_kafka.coordinator.config.ZkCredentials`, a client from :func:`open_client` authenticates on every
connection and creates every node (``create``, ``ensure_path``, transactions, the lock recipe's
ephemeral sequence nodes) with the credentials' ACL, so the subtree ``<root>/<pipeline>`` and all
below it can be read and written by that user only. The parents above the subtree root that
:func:`ensure_subtree` creates get :meth:`~laminar_kafka.coordinator.config.ZkCredentials.parent_acl` (other
pipelines, with other credentials, can still create their subtree beside it).

kazoo logs every request it sends at DEBUG, the authentication packet (with ``user:password``)
included; :func:`open_client` installs :class:`RedactAuthPackets` on kazoo's logger, so no log line
carries the password.

A session without the credentials (or with wrong ones: ZooKeeper accepts any digest identity and
checks it on each access) meets ``NoAuthError``; :func:`ensure_subtree` turns that into one
:class:`~laminar_kafka.coordinator.errors.AccessDeniedError` that names the path and never a secret.
"""
from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError, NodeExistsError
from kazoo.protocol.serialization import Auth

from laminar_kafka.coordinator.config import ZkCredentials
from laminar_kafka.coordinator.errors import AccessDeniedError

logger = logging.getLogger(__name__)

__all__ = ["open_client", "check_access", "ensure_subtree", "access_denied", "parent_paths", "RedactAuthPackets"]

#: The logger kazoo's clients log to (their default ``logger``).
KAZOO_LOGGER = "kazoo.client"


class RedactAuthPackets(logging.Filter):
    """Replaces the credential of every kazoo ``Auth`` packet in a record's arguments by ``***``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(a._replace(auth="***") if isinstance(a, Auth) else a for a in record.args)
        return True


def _redact_kazoo_logs() -> None:
    kazoo_logger = logging.getLogger(KAZOO_LOGGER)
    if not any(isinstance(f, RedactAuthPackets) for f in kazoo_logger.filters):
        kazoo_logger.addFilter(RedactAuthPackets())


def open_client(
    hosts: str, timeout: float, credentials: ZkCredentials | None = None, *, read_only: bool = False,
) -> KazooClient:
    """A new, not yet started KazooClient for ``hosts`` (a kazoo connection string, chroot allowed).

    With ``credentials`` it authenticates on every connection and creates nodes with their ACL;
    without, it is a plain client. Suitable for read-only tools (``read_only=True``) as well as the
    coordinator. kazoo's own log lines go through :mod:`logging` (logger ``kazoo.client``), with the
    credentials redacted.
    """
    if credentials is None:
        return KazooClient(hosts=hosts, timeout=timeout, read_only=read_only)
    _redact_kazoo_logs()
    return KazooClient(hosts=hosts, timeout=timeout, read_only=read_only,
                       auth_data=credentials.kazoo_auth_data(), default_acl=credentials.acl())


def access_denied(path: str, cause: BaseException | None = None) -> AccessDeniedError:
    """The one error for a session that may not use the subtree at ``path``."""
    return AccessDeniedError(f"ZooKeeper denied access to {path}: credentials missing or wrong", cause=cause)


def parent_paths(path: str) -> list[str]:
    """The ancestors of the absolute ``path``, outermost first (``/a/b/c`` -> ``['/a', '/a/b']``)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def check_access(client: KazooClient, base: str) -> None:
    """Raise :class:`AccessDeniedError` unless this (started) session may read the subtree ``base``
    (read-only tools call it first; a missing ``base`` raises kazoo's NoNodeError)."""
    try:
        client.get_children(base)
    except (NoAuthError, AuthFailedError) as exc:
        raise access_denied(base, exc) from exc


def ensure_subtree(client: KazooClient, base: str, credentials: ZkCredentials | None) -> None:
    """Create the subtree root ``base`` and its missing parents, then check this (started) session may
    read it; raise :class:`AccessDeniedError` when ZooKeeper denies it.

    With credentials, ``base`` gets their ACL and new parents :meth:`ZkCredentials.parent_acl`; an
    existing subtree created without credentials stays open (a warning says so). Nodes that already
    exist keep their ACL.
    """
    parent_acl = credentials.parent_acl() if credentials is not None else None
    try:
        for parent in parent_paths(base):
            try:
                client.create(parent, acl=parent_acl)
            except NodeExistsError:
                pass
        try:
            client.create(base)  # the client's default ACL
        except NodeExistsError:
            pass
        check_access(client, base)
        if credentials is not None:
            acls, _ = client.get_acls(base)
            if any(acl.id.scheme == "world" for acl in acls):
                logger.warning("the ZooKeeper subtree %s was created without credentials: its existing nodes "
                               "stay open to every client", base)
    except (NoAuthError, AuthFailedError) as exc:
        raise access_denied(base, exc) from exc
