"""Reading a node's /healthz and /readyz from a test: one request, and a recorder of every answer."""
from __future__ import annotations

import http.client
import time
from dataclasses import dataclass, field

from laminar_kafka.devstack.processes import NodeProcess


@dataclass(frozen=True)
class Answer:
    """One probe answer: when (``time.monotonic``), the HTTP status (None: nothing answered), the body,
    and whether the node process was still running when it came back."""

    at: float
    status: int | None
    body: str
    alive: bool


def ask(host: str, port: int, path: str, timeout: float = 2.0) -> tuple[int | None, str]:
    """``GET path`` on ``host:port``: the status and the body's first line (None, '' when nothing answers)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode().strip()
    except OSError:
        return None, ""
    finally:
        connection.close()


@dataclass
class ProbeLog:
    """Every answer of one endpoint of one node, polled by the test."""

    node: NodeProcess
    host: str
    port: int
    path: str
    answers: list[Answer] = field(default_factory=list)

    def poll(self) -> Answer:
        status, body = ask(self.host, self.port, self.path)
        answer = Answer(time.monotonic(), status, body, self.node.alive())
        self.answers.append(answer)
        return answer

    def poll_until(self, wanted: int, timeout: float, interval: float = 0.05) -> Answer:
        """Poll until the endpoint answers ``wanted``; AssertionError with the answers seen after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.poll()
            if answer.status == wanted:
                return answer
            if not self.node.alive() and answer.status is None:
                break
            time.sleep(interval)
        raise AssertionError(f"{self.path} never answered {wanted} in {timeout:g}s; seen {self.summary()}\n"
                             f"node log:\n{self.node.log_text()[-3000:]}")

    def poll_until_answered(self, timeout: float, interval: float = 0.05) -> Answer:
        """The first answer of the endpoint (it listens once the node checked its inputs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.node.alive():
            answer = self.poll()
            if answer.status is not None:
                return answer
            time.sleep(interval)
        raise AssertionError(f"{self.path} never answered in {timeout:g}s\nnode log:\n{self.node.log_text()[-3000:]}")

    def summary(self) -> list[tuple[int | None, str]]:
        """The distinct answers in the order first seen."""
        seen: list[tuple[int | None, str]] = []
        for answer in self.answers:
            if (answer.status, answer.body) not in seen:
                seen.append((answer.status, answer.body))
        return seen
