"""An embedded pipeline started twice on one output (a service restarted while the old process still
runs, or the same command in two terminals): the second process exits in one line naming the first,
and the output stays exact. Before the state directory's lock, both read the same manifest and
landed every record twice."""
from __future__ import annotations

from laminar_kafka.cluster.lake.parquet.sink import list_published, open_output
from tests.integration.cluster.harness import Pipeline, assert_exact


def test_a_second_embedded_node_on_one_output_is_refused(embedded: Pipeline) -> None:
    embedded.produce(rate=2000)
    first = embedded.launch(1)
    fs, root = open_output(embedded.output)
    embedded.wait_until(lambda: bool(list_published(fs, root)), 60, "the first node published")
    second = embedded.launch(2)
    assert second.wait(60) == 1
    log = second.log_text()
    assert f"is in use by another embedded node (pid {first.pid} " in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert first.alive()
    assert_exact(embedded.finish(), embedded)
