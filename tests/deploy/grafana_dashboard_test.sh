#!/usr/bin/env bash
# deploy/grafana/floe-dashboard.json: every target has a PromQL expr over Floe's
# metric names (check_dashboard.py), and every expr parses (promtool check rules
# on a rule file of one recording rule per expr, as dashboard_queries.py prints them).
set -euo pipefail
ROOT=${FLOE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
HERE=$ROOT/tests/deploy
/usr/bin/python3 "$HERE/check_dashboard.py" "$ROOT/deploy/grafana/floe-dashboard.json"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 "$HERE/dashboard_queries.py" "$ROOT/deploy/grafana/floe-dashboard.json" >"$TMP/exprs.txt"
n=$(wc -l <"$TMP/exprs.txt")
((n > 0)) || { echo "FAIL: no exprs"; exit 1; }
/usr/bin/python3 - "$TMP/exprs.txt" "$TMP/rules.yaml" <<'PY'
import sys, yaml
exprs = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
rules = [{"record": f"floe:dashboard_expr_{i}", "expr": e} for i, e in enumerate(exprs)]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"))
PY
promtool check rules "$TMP/rules.yaml"
echo "grafana dashboard: $n exprs ok"
