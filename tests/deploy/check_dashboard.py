#!/usr/bin/env python3
"""Checks deploy/grafana/floe-dashboard.json (and, with --rules FILE, an alert
rule file): every panel target has a PromQL expr, and every metric it selects is
one Floe exports (the names below; histograms with _bucket/_sum/_count)."""
import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard_queries  # noqa: E402

COUNTERS_AND_GAUGES = {
    # worker (label model_name)
    "floe_num_requests_running", "floe_num_requests_waiting", "floe_kv_cache_usage_perc", "floe_cache_config_info",
    "floe_prompt_tokens_total", "floe_generation_tokens_total",
    "floe_prefix_cache_queries_total", "floe_prefix_cache_hits_total", "floe_num_preemptions_total",
    "floe_engine_steps_total", "floe_request_success_total",
    # router
    "floe_router_requests_total", "floe_router_requests_in_flight", "floe_router_admission_rejections_total",
    "floe_router_retries_total", "floe_router_worker_healthy", "floe_router_worker_outstanding",
    "floe_router_worker_ejections_total", "floe_router_worker_panic_picks_total",
    # speculative decoding, suffix cache, shift parallelism
    "floe_spec_decode_num_draft_tokens_total", "floe_spec_decode_num_accepted_tokens_total", "floe_spec_decode_num_drafts_total",
    "floe_suffix_cache_cached_responses", "floe_suffix_cache_bytes", "floe_parallel_mode",
    "floe_suffix_cache_active_request_bytes", "floe_suffix_cache_max_bytes",
    "floe_suffix_cache_drafts_total", "floe_suffix_cache_speculate_queries_total",
    # the worker's view of its suffix-cache replicas
    "floe_suffix_cache_client_rpc_failures_total", "floe_suffix_cache_client_skipped_calls_total",
    "floe_suffix_cache_client_up", "floe_suffix_cache_client_unreachable_total",
    "floe_suffix_cache_client_reconnect_attempts_total", "floe_suffix_cache_client_dropped_lifecycle_total",
}
HISTOGRAMS = {
    "floe_time_to_first_token_seconds", "floe_inter_token_latency_seconds",
    "floe_request_time_per_output_token_seconds", "floe_e2e_request_latency_seconds",
    "floe_request_queue_time_seconds", "floe_request_prefill_time_seconds", "floe_request_decode_time_seconds",
    "floe_request_inference_time_seconds",
    "floe_request_prompt_tokens", "floe_request_generation_tokens", "floe_router_time_to_first_token_seconds",
    "floe_suffix_cache_rpc_latency_seconds", "floe_spec_decode_accepted_length",
    "floe_suffix_cache_client_rpc_latency_seconds", "floe_suffix_cache_step_phase_seconds",
}
KNOWN = COUNTERS_AND_GAUGES | {h + s for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")}

# What the dashboard must show (the deliverable's list), as metrics it must use.
REQUIRED = {
    "throughput": {"floe_generation_tokens_total", "floe_router_requests_total"},
    "TTFT/ITL/E2E quantiles": {"floe_time_to_first_token_seconds_bucket", "floe_inter_token_latency_seconds_bucket",
                               "floe_e2e_request_latency_seconds_bucket"},
    "running vs waiting": {"floe_num_requests_running", "floe_num_requests_waiting"},
    "KV usage": {"floe_kv_cache_usage_perc"},
    "prefix hit rate": {"floe_prefix_cache_hits_total", "floe_prefix_cache_queries_total"},
    "speculation": {"floe_spec_decode_num_accepted_tokens_total", "floe_spec_decode_num_draft_tokens_total",
                    "floe_spec_decode_num_drafts_total"},
    "suffix cache": {"floe_suffix_cache_cached_responses", "floe_suffix_cache_bytes",
                     "floe_suffix_cache_rpc_latency_seconds_bucket"},
    "router health and rejections": {"floe_router_worker_healthy", "floe_router_admission_rejections_total"},
}


def check_dashboard(path):
    errors = []
    d = dashboard_queries.load(path)
    used = set()
    ids = set()
    n_targets = 0
    for p in dashboard_queries.panels(d):
        title = p.get("title", "?")
        if p.get("id") in ids:
            errors.append(f"panel {title!r}: duplicate id {p.get('id')}")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        if "gridPos" not in p:
            errors.append(f"panel {title!r}: no gridPos")
        targets = p.get("targets", [])
        if not targets:
            errors.append(f"panel {title!r}: no targets")
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids):
            errors.append(f"panel {title!r}: duplicate refIds {ref_ids}")
        for t in targets:
            n_targets += 1
            expr = t.get("expr", "")
            if not isinstance(expr, str) or not expr.strip():
                errors.append(f"panel {title!r} target {t.get('refId')}: no PromQL expr")
                continue
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                errors.append(f"panel {title!r}: unbalanced brackets in {expr!r}")
            names = dashboard_queries.metric_names(expr)
            if not names:
                errors.append(f"panel {title!r}: expr selects no metric: {expr!r}")
            for n in sorted(names - KNOWN):
                errors.append(f"panel {title!r}: unknown metric {n!r} in {expr!r}")
            used |= names
    for q in dashboard_queries.variable_queries(d):
        for n in sorted(dashboard_queries.metric_names(q) - KNOWN):
            errors.append(f"variable query {q!r}: unknown metric {n!r}")
    for what, names in REQUIRED.items():
        missing = names - used
        if missing:
            errors.append(f"dashboard lacks {what}: {sorted(missing)}")
    print(f"dashboard: {n_targets} targets, {len(used)} metrics")
    return errors


def check_rules(path):
    """Rule expressions may also use `up` and the file's own recorded series."""
    errors = []
    with open(path) as f:
        doc = yaml.safe_load(f)
    rules = [r for g in doc["groups"] for r in g["rules"]]
    allowed = KNOWN | {"up"} | {r["record"] for r in rules if "record" in r}
    for r in rules:
        name = r.get("alert") or r.get("record")
        for n in sorted(dashboard_queries.metric_names(r["expr"]) - allowed):
            errors.append(f"rule {name}: unknown metric {n!r}")
    print(f"rules: {len(rules)} checked")
    return errors


def main(argv):
    root = os.environ.get("FLOE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    errors = []
    if "--rules" in argv:
        errors += check_rules(argv[argv.index("--rules") + 1])
    else:
        errors += check_dashboard(argv[0] if argv else os.path.join(root, "deploy", "grafana", "floe-dashboard.json"))
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
