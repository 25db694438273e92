"""A node's HTTP endpoints on its metrics port: ``/metrics``, ``/healthz`` and ``/readyz``.

- ``/metrics``: the node's registry in the Prometheus text format (``prometheus_client.generate_latest``).
- ``/healthz`` and ``/readyz``: 200 with ``ok`` / ``ready`` and the verdict's reason, or 503 with the
  one-line reason; each answer is the verdict of ``probes`` on the snapshot the runtime last published
  (no request touches Kafka or ZooKeeper). Without ``probes`` (a node not wired for them) both answer 503.

Quiet: no line per request on stderr. Each connection runs on its own daemon thread, and is closed
when the client sends nothing for :data:`REQUEST_TIMEOUT_S` (an idle or half-open connection cannot
hold a thread for ever).
"""
from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from laminar_kafka.cluster.runtime.probes import Verdict

logger = logging.getLogger(__name__)

__all__ = ["REQUEST_TIMEOUT_S", "NodeEndpoints", "Probes", "serve_node"]

#: seconds a connection may stay silent (reading a request, or waiting for the next one) before it is closed
REQUEST_TIMEOUT_S = 10.0


class Probes(Protocol):
    """Where the endpoints get their verdicts (callable from any thread)."""

    def health(self) -> Verdict: ...

    def readiness(self) -> Verdict: ...


_UNWIRED = Verdict(False, "probes not wired in this process")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, probes: Probes | None,
                 request_timeout_s: float) -> None:
        self.address_family = _family(address[0])
        self.registry = registry
        self.probes = probes
        self.request_timeout_s = request_timeout_s
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        # the socket timeout of every read and write on this connection; a silent client times out
        # and the connection is closed
        self.connection.settimeout(self.server.request_timeout_s)

    def do_GET(self) -> None:  # the name http.server dispatches to
        path = self.path.split("?", 1)[0]
        probes = self.server.probes
        if path == "/metrics":
            self._answer(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._verdict(probes.health() if probes is not None else _UNWIRED)
        elif path == "/readyz":
            self._verdict(probes.readiness() if probes is not None else _UNWIRED)
        else:
            self._answer(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8")

    def _verdict(self, verdict: Verdict) -> None:
        self._answer(200 if verdict.ok else 503, f"{verdict.reason}\n".encode(), "text/plain; charset=utf-8")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # the signature http.server calls
        """Quiet: no line per request (http.server writes each to stderr by default)."""


def _family(host: str) -> socket.AddressFamily:
    """The address family of ``host`` (``::`` binds IPv6)."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0] if infos else socket.AF_INET


class NodeEndpoints:
    """The running server: its bound ``port`` (``serve_node(0, ...)`` picks a free one) and :meth:`stop`."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self.port: int = server.server_port
        self._thread = threading.Thread(target=server.serve_forever, name="node-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def serve_node(port: int, address: str, registry: CollectorRegistry, probes: Probes | None,
               request_timeout_s: float = REQUEST_TIMEOUT_S) -> NodeEndpoints:
    """Serve the endpoints on ``address:port`` from a daemon thread until ``stop()``; a connection
    silent for ``request_timeout_s`` is closed. Raises :class:`OSError` when the port cannot be bound."""
    endpoints = NodeEndpoints(_Server((address, port), registry, probes, request_timeout_s))
    logger.info("metrics on http://%s:%d/metrics, probes on /healthz and /readyz", address, endpoints.port)
    return endpoints
