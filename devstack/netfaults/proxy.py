"""A fault-injecting TCP proxy on host loopback, in front of one server: `FaultProxy`.

Contract: `FaultProxy(upstream_port)` listens on ``127.0.0.1:<port>`` (a free port, or the one
given) from construction until `close()`, and forwards every connection to
``127.0.0.1:<upstream_port>`` through a :class:`~laminar_kafka.devstack.netfaults.relay.TcpRelay`
(one asyncio loop in a daemon thread). Clients that should be faultable talk to `port` (or
`endpoint`); the others keep talking to the server directly. Faults, each in force when the call
returns:

- `cut("blackhole")`: the server is unreachable as behind a partition: open connections freeze (no
  byte forwarded either way, nothing closed), new ones are accepted and hear nothing; `heal()`
  resumes them in order (a connection whose client gave up meanwhile never reaches the server).
- `cut("reset")`: every connection is reset, new ones too (clients fail at once, as if refused).
- `set_latency(ms)`: a slow link: each forwarded chunk waits ``ms`` in each direction, pipelined.

The upstream server may stop and start again on the same port meanwhile: its connections end (the
proxy passes the close on), a connection made while it is down is reset (as if refused), and new
ones reach the restarted server. Needs neither root nor namespaces (unlike
:class:`~laminar_kafka.devstack.netfaults.node.NodeNetwork`, which puts the faults between one node
and every server).
"""
from __future__ import annotations

import socket

from laminar_kafka.devstack.netfaults.relay import GroupStats, TcpRelay

__all__ = ["FaultProxy"]

#: the relay's server group the proxy uses (a proxy fronts one server, so one group)
_GROUP = "other"


class FaultProxy:
    """``127.0.0.1:<port>`` -> ``127.0.0.1:<upstream_port>``, with faults (see the module docstring)."""

    def __init__(self, upstream_port: int, label: str = "proxy", port: int = 0) -> None:
        if not 0 < upstream_port < 65536:
            raise ValueError(f"upstream_port must be a TCP port, got {upstream_port}")
        self.upstream_port = upstream_port
        self.label = label
        listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.port: int = listener.getsockname()[1]
        self._relay = TcpRelay(label)
        try:
            self._relay.listen(listener, _GROUP, upstream_port)
        except BaseException:  # close what was made, then re-raised
            self._relay.close()
            listener.close()
            raise

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the proxy as an HTTP endpoint (S3, a REST catalog)."""
        return f"http://127.0.0.1:{self.port}"

    def cut(self, mode: str = "blackhole") -> None:
        """Make the server unreachable through the proxy: ``blackhole`` (silence) or ``reset`` (refusals)."""
        self._relay.cut(_GROUP, mode)

    def heal(self) -> None:
        """Undo :meth:`cut`; frozen connections resume where they stopped."""
        self._relay.heal(_GROUP)

    def set_latency(self, ms: float) -> None:
        """Delay every forwarded chunk by ``ms`` in each direction (0: none)."""
        self._relay.set_latency(ms, _GROUP)

    def stats(self) -> GroupStats:
        """The relay's counters and the fault in force."""
        return self._relay.stats()[_GROUP]

    def close(self) -> None:
        """Stop listening and close every connection. Idempotent; never raises."""
        self._relay.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaultProxy({self.label!r}, port={self.port}, upstream_port={self.upstream_port})"
