"""deploy/monitoring: the alert rules pass `promtool check rules` and their unit tests (`promtool test
rules`), and the rules and the Grafana dashboard name only metrics the node and the audit export.

promtool comes from ``LAMINAR_PROMTOOL`` (what ``.ci/go-tools.sh`` prints) or PATH. Without it the
promtool tests skip with one line naming ``.ci/go-tools.sh``, except under
``LAMINAR_DEPLOY_TOOLS_REQUIRED=1`` (CI), where they fail.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from laminar_kafka.cluster.metrics import NodeMetrics
from laminar_kafka.cluster.ops.audit_watch import AuditMetrics
from tests.unit.deploy.helm_tools import find_tool

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "alerts.yaml"
RULE_TESTS = MONITORING / "alerts_test.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
SEVERITIES = {"critical", "warning", "info"}
#: Prometheus's own series, which no exporter exports
PROMETHEUS_SERIES = {"up"}


# ------------------------------------------------------------------------------------------ promtool

@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool binary (``LAMINAR_PROMTOOL``, else PATH); skips or fails when there is none."""
    return find_tool("promtool", "LAMINAR_PROMTOOL")


def run_promtool(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules(promtool: str) -> None:
    done = run_promtool(promtool, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout + done.stderr


def test_the_rules_pass_their_promtool_unit_tests(promtool: str) -> None:
    done = run_promtool(promtool, "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


# ------------------------------------------------------------------------------- the rules' shape

def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_has_a_for_a_severity_and_annotations_that_point_at_the_docs() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "alert names repeat"
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{name}: no `for`"
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert set(rule["annotations"]) >= {"summary", "description"}, name
        description = rule["annotations"]["description"]
        # 'See docs/deploy.md, "Alerts"': the file exists and holds the quoted text
        links = re.findall(r'((?:docs|deploy)/[\w./-]+\.md)(?:, "([^"]+)")?', description)
        assert links, f"{name}: the description names no docs page"
        for page, section in links:
            text = (REPO / page).read_text()
            assert not section or section in text, f"{name}: {page} has no {section!r}"


def test_every_alert_has_a_promtool_case_where_it_fires_and_one_where_it_does_not() -> None:
    """Firing: an evaluation expecting it with labels and annotations; not firing: one expecting none."""
    fires: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for evaluation in case["alert_rule_test"]:
            expected = evaluation.get("exp_alerts") or []
            if not expected:
                silent.add(evaluation["alertname"])
            elif all(set(alert["exp_annotations"]) >= {"summary", "description"} and alert["exp_labels"]
                     for alert in expected):
                fires.add(evaluation["alertname"])
    names = {rule["alert"] for rule in alert_rules()}
    assert names - fires == set(), "alerts never seen firing with their labels and annotations"
    assert names - silent == set(), "alerts never seen staying silent"


# ------------------------------------------------------------------------------------ the dashboard

def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_the_dashboard_is_valid_with_a_datasource_and_queries_on_every_panel() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("node", "topic"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    every = list(panels(board))
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: set[tuple[int, int]] = set()
    for panel in every:
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, panel["title"]
        covered = {(x, y) for x in range(position["x"], position["x"] + position["w"])
                   for y in range(position["y"], position["y"] + position["h"])}
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], f"{panel['title']}: no unit"
        assert panel.get("description"), f"{panel['title']}: no description"
        assert panel["targets"], f"{panel['title']}: no query"
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


# ----------------------------------------------------------------------- metric names in PromQL

#: PromQL's keywords and literals: identifiers that are neither a function call nor a metric
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                "offset", "bool", "atan2", "inf", "nan", "start", "end"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a Grafana query may hold ``$variables``)."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)  # strings
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana's variables
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    # label lists of grouping and matching clauses
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call is None and word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def test_metric_names_are_found_in_promql_and_labels_functions_and_variables_are_not() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (le, node) (rate(a_seconds_bucket{node=~"$node", x="y z"}[$__rate_interval])))'
    ) == {"a_seconds_bucket"}
    assert metric_names(
        'up == 0 and on (job, instance) max_over_time(b_info[1d]) > bool 1e3 unless c_total offset 15m'
    ) == {"up", "b_info", "c_total"}
    assert metric_names(
        'min_over_time(sum by (topic) (d_records)[15m:1m]) * on (job) group_left (node) e_info or vector(0)'
    ) == {"d_records", "e_info"}
    assert metric_names('time() - (f_timestamp_seconds > 0) + Inf') == {"f_timestamp_seconds"}
    assert metric_names('sum(g_total) without (state) / count(h{state="LOST"})') == {"g_total", "h"}


def promql_expressions() -> dict[str, str]:
    """Every PromQL expression of the rules and the dashboard (its variables' label_values included),
    keyed by where it is."""
    found = {f"alert {rule['alert']}": rule["expr"] for rule in alert_rules()}
    board = dashboard()
    for panel in panels(board):
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} {target['refId']}"] = target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert selector, f"variable {variable['name']}: {query!r} is not label_values(selector, label)"
            found[f"variable {variable['name']}"] = selector.group(1)
    return found


def populated(registry: CollectorRegistry, families: list[object]) -> CollectorRegistry:
    """``registry`` with one child set in each labelled family of ``families``: a family with labels
    exports nothing until one exists (the node creates per-partition, per-outcome and per-state
    children only when it sees one). prometheus_client has no public accessor for a family's label
    names, hence ``_labelnames``."""
    for family in families:
        if isinstance(family, (Counter, Gauge, Histogram)) and family._labelnames:
            child = family.labels(*["x"] * len(family._labelnames))
            if isinstance(family, Histogram):
                child.observe(0.5)
            elif isinstance(family, Counter):
                child.inc()
            else:
                child.set(1)
    return registry


def exported_series_names() -> set[str]:
    """The series names a node's and the audit's ``/metrics`` show, every family populated
    (histograms as ``_bucket``, ``_sum``, ``_count``; counters with ``_total``)."""
    node = NodeMetrics(1)
    audit = AuditMetrics()
    names = set()
    for registry in (populated(node.registry, list(vars(node).values())),
                     populated(audit.registry, list(vars(audit).values()))):
        text = generate_latest(registry).decode()
        names |= {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    return names


def test_the_rules_and_the_dashboard_name_only_exported_metrics() -> None:
    exported = exported_series_names() | PROMETHEUS_SERIES
    unknown = {}
    for where, expr in promql_expressions().items():
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        if names - exported:
            unknown[where] = sorted(names - exported)
    assert unknown == {}, "metrics the node and the audit do not export"



# ------------------------------------------------------------------------------------------ the README

def test_the_readmes_prometheus_rule_wrapper_holds_the_rules(tmp_path: Path) -> None:
    """The README's shell block that wraps alerts.yaml into a PrometheusRule runs as written (from a
    directory that has the repository's deploy/, up to its `kubectl apply`)."""
    readme = (MONITORING / "README.md").read_text()
    blocks = [block for block in re.findall(r"```sh\n(.*?)```", readme, re.S) if "kind: PrometheusRule" in block]
    assert len(blocks) == 1
    commands = "\n".join(line for line in blocks[0].splitlines() if not line.startswith("kubectl "))
    (tmp_path / "deploy").symlink_to(REPO / "deploy")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    wrapped = yaml.safe_load((tmp_path / "laminar-kafka-rules.yaml").read_text())
    assert (wrapped["apiVersion"], wrapped["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert wrapped["spec"] == yaml.safe_load(RULES.read_text())


def grafana_expanded(expr: str) -> str:
    """``expr`` with Grafana's variables as Grafana would expand them (all values selected)."""
    for variable, value in (("$__rate_interval", "1m"), ("$__range", "1h"), ("$node", ".*"), ("$topic", ".*")):
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a variable this test does not expand: {expr}"
    return expr


def test_promtool_parses_every_dashboard_query(promtool: str, tmp_path: Path) -> None:
    """Each query, its variables expanded, as a recording rule that `promtool check rules` parses."""
    queries = {where: expr for where, expr in promql_expressions().items() if not where.startswith("alert ")}
    rules = [{"record": f"dashboard:query_{index}", "expr": grafana_expanded(expr)}
             for index, expr in enumerate(queries.values())]
    path = tmp_path / "dashboard_queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run_promtool(promtool, "check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout + done.stderr
