#!/usr/bin/env python3
"""Checks deploy/prometheus/headroom.rules.yml and deploy/grafana/headroom.json against the
metrics headroom actually exposes (ctest monitoring_rules_metric_names, monitoring_dashboard).

The exposition is the real one: `metrics_exposition agent|coordinator` prints what the agent's
and the coordinator's /metrics routes serve (their own functions, every optional family
present). Every metric name an expression uses must be one of those, or a recording rule of the
rules file (rules only: the dashboard must work without the rules loaded).

    check_monitoring.py rules RULES.yml --exposition BIN --docs DOCS_DIR
    check_monitoring.py dashboard DASHBOARD.json --exposition BIN
"""
import argparse
import json
import os
import re
import subprocess
import sys

import yaml

# PromQL words that are not metric names.
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan", "atan2",
}
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def exposed_names(exposition):
    """Metric names in the agent's and coordinator's expositions: each `# TYPE` family, with a
    summary's _sum and _count."""
    names = set()
    for which in ("agent", "coordinator"):
        text = subprocess.run([exposition, which], check=True, capture_output=True,
                              text=True).stdout
        for line in text.splitlines():
            if not line.startswith("# TYPE "):
                continue
            _, _, name, kind = line.split(" ")
            names.add(name)
            if kind in ("summary", "histogram"):
                names.update({name + "_sum", name + "_count"})
            if kind == "histogram":
                names.add(name + "_bucket")
    if len(names) < 20:
        raise SystemExit(f"only {len(names)} metric names in the exposition: {sorted(names)}")
    return names


def metric_names(expr):
    """The metric names an expression selects: identifiers outside strings, label matchers,
    ranges and grouping clauses that are neither functions nor keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", " ", e)  # Grafana variables
    names = set()
    for m in IDENT.finditer(e):
        word = m.group(0)
        if word.lower() in KEYWORDS:
            continue
        if e[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e3, 5m)
        names.add(word)
    return names


def github_anchor(heading):
    a = heading.strip().lower()
    a = re.sub(r"[^\w\- ]", "", a)
    return a.replace(" ", "-")


def doc_anchors(path):
    anchors = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^#+\s+(.*)$", line)
            if m:
                anchors.add(github_anchor(m.group(1)))
    return anchors


def check_rules(args, failures):
    names = exposed_names(args.exposition)
    with open(args.file, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    recorded = {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    alerts = 0
    for group in doc["groups"]:
        for rule in group["rules"]:
            what = rule.get("alert") or rule.get("record")
            for name in sorted(metric_names(rule["expr"])):
                if name not in names and name not in recorded:
                    failures.append(f"{what}: '{name}' is neither exposed nor recorded")
            if "alert" not in rule:
                continue
            alerts += 1
            if "for" not in rule:
                failures.append(f"{what}: no `for:`")
            if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
                failures.append(f"{what}: severity label missing or not critical/warning/info")
            ann = rule.get("annotations", {})
            for key in ("summary", "description", "runbook", "runbook_url"):
                if not ann.get(key, "").strip():
                    failures.append(f"{what}: annotation {key} missing")
            url = ann.get("runbook_url", "")
            m = re.match(r"^(docs/[A-Z]+\.md)#([a-z0-9\-]+)$", url)
            if not m:
                failures.append(f"{what}: runbook_url '{url}' is not docs/FILE.md#anchor")
                continue
            path = os.path.join(args.docs, os.path.basename(m.group(1)))
            if not os.path.exists(path):
                failures.append(f"{what}: runbook_url names {m.group(1)}, which does not exist")
            elif m.group(2) not in doc_anchors(path):
                failures.append(f"{what}: {m.group(1)} has no heading for #{m.group(2)}")
    if alerts == 0:
        failures.append("no alerts in the rules file")
    return alerts


def check_dashboard(args, failures):
    names = exposed_names(args.exposition)
    with open(args.file, encoding="utf-8") as f:
        d = json.load(f)
    for key in ("title", "uid", "panels", "templating", "schemaVersion", "time"):
        if key not in d:
            failures.append(f"dashboard: '{key}' missing")
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        failures.append(f"dashboard: schemaVersion {d.get('schemaVersion')} (expected >= 36)")
    variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        failures.append("dashboard: no `datasource` variable of type datasource (prometheus)")
    for v in variables.values():
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.match(r"^label_values\(\s*([^,]+),\s*\w+\s*\)$", q)
        if not m:
            failures.append(f"variable {v['name']}: query '{q}' is not label_values(SELECTOR, LABEL)")
            continue
        for name in metric_names(m.group(1)):
            if name not in names:
                failures.append(f"variable {v['name']}: '{name}' is not exposed")
    panels = []
    for p in d.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))  # collapsed rows
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)) or None in ids:
        failures.append(f"dashboard: panel ids missing or repeated: {ids}")
    graphs = 0
    for p in panels:
        title = p.get("title", "")
        for key in ("type", "title", "gridPos"):
            if key not in p:
                failures.append(f"panel {p.get('id')} '{title}': '{key}' missing")
        if p.get("type") == "row":
            continue
        graphs += 1
        if p.get("datasource", {}).get("uid") != "${datasource}":
            failures.append(f"panel '{title}': datasource is not the ${{datasource}} variable")
        targets = p.get("targets", [])
        if not targets:
            failures.append(f"panel '{title}': no targets")
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)) or None in refs:
            failures.append(f"panel '{title}': refIds missing or repeated")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                failures.append(f"panel '{title}': a target without expr")
            for name in sorted(metric_names(expr)):
                if name not in names:
                    failures.append(f"panel '{title}': '{name}' is not exposed")
    return graphs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["rules", "dashboard"])
    parser.add_argument("file")
    parser.add_argument("--exposition", required=True)
    parser.add_argument("--docs", help="the docs folder (rules: runbook_url targets)")
    args = parser.parse_args()
    # The extraction itself, on expressions whose answer is known.
    assert metric_names('sum without (x) (rate(a_total{w="30s"}[10m])) / on (i) b') == {"a_total", "b"}
    assert metric_names('histogram_quantile(0.9, c{q=~"a|b"}) > 1e3 or vector(0)') == {"c"}
    assert metric_names('x[5m:1m] offset 5m and bool y') == {"x", "y"}
    failures = []
    if args.what == "rules":
        if not args.docs:
            parser.error("rules needs --docs")
        n = check_rules(args, failures)
        what = f"{n} alerts"
    else:
        n = check_dashboard(args, failures)
        what = f"{n} panels"
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"{args.file}: {what}, every metric exposed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
