#!/usr/bin/env python3
"""Prints every PromQL expression of the Grafana dashboard, one per line.

    dashboard_queries.py [--raw] [DASHBOARD.json]

By default Grafana's variables are replaced so that each line is plain PromQL a
Prometheus server evaluates as is ($__rate_interval -> 1m, $model -> .*,
${datasource} is not part of any expr); --raw prints them as written. Multi-line
expressions are joined into one line. Also a module: panel_targets(),
exprs(), metric_names() are used by check_dashboard.py.
"""
import json
import os
import re
import sys

DEFAULT_DASHBOARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "grafana",
                                 "floe-dashboard.json")

# What a Prometheus server gets in place of Grafana's variables.
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "${model}": ".*",
    "$model": ".*",
}


def load(path=DEFAULT_DASHBOARD):
    with open(path) as f:
        return json.load(f)


def panels(dashboard):
    """Every panel, rows' nested panels included."""
    for p in dashboard.get("panels", []):
        yield p
        for nested in p.get("panels", []):
            yield nested


def panel_targets(dashboard):
    """(panel title, target) for every target of every non-row panel."""
    for p in panels(dashboard):
        if p.get("type") == "row":
            continue
        for t in p.get("targets", []):
            yield p.get("title", ""), t


def variable_queries(dashboard):
    """The PromQL-like queries of the query variables (label_values(...))."""
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            yield q.get("query") if isinstance(q, dict) else q


def substitute(expr):
    for var, value in SUBSTITUTIONS.items():
        expr = expr.replace(var, value)
    return expr


def one_line(expr):
    return " ".join(expr.split())


def exprs(dashboard, raw=False):
    out = []
    for _, t in panel_targets(dashboard):
        e = one_line(t.get("expr", ""))
        out.append(e if raw else substitute(e))
    return out


_FUNCTIONS_AND_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "label_values", "abs", "clamp_min",
    "clamp_max", "clamp", "vector", "scalar", "time", "absent", "changes", "resets", "round", "sort", "sort_desc",
    "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time", "last_over_time", "inf",
    "nan", "le",
}


def metric_names(expr):
    """Metric names an expression selects (label names, functions, strings and ranges removed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)        # string literals
    e = re.sub(r"\{[^}]*\}", "", e)                        # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                       # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)  # grouping labels
    # label_values(metric, label): the label is not a metric.
    e = re.sub(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", r"\1", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", e):
        tok = m.group(1)
        if tok.lower() in _FUNCTIONS_AND_KEYWORDS:
            continue
        names.add(tok)
    return names


def main(argv):
    raw = "--raw" in argv
    args = [a for a in argv if a != "--raw"]
    dashboard = load(args[0] if args else DEFAULT_DASHBOARD)
    for e in exprs(dashboard, raw=raw):
        print(e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
