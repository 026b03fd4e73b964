#!/usr/bin/env bash
# promtool check rules / test rules / check config on deploy/prometheus, and
# every rule expression selects only metrics Floe exports.
set -euo pipefail
ROOT=${FLOE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT/deploy/prometheus"
promtool check rules floe-alerts.yaml
promtool test rules floe-alerts.test.yaml
promtool check config prometheus.example.yml
/usr/bin/python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); assert d[0]["job_name"] and d[0]["relabel_configs"]' \
  scrape-config.kubernetes.yaml
/usr/bin/python3 "$ROOT/tests/deploy/check_dashboard.py" --rules floe-alerts.yaml
echo "prometheus rules: ok"
