//! Every query of the Grafana dashboard uses only metrics cachet exports.

use std::collections::BTreeSet;

#[test]
fn dashboard_queries_use_only_exported_metrics() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/dashboards/cachet.json"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exported: BTreeSet<String> = cachet::metrics::Metrics::new()
        .names()
        .iter()
        .cloned()
        .collect();
    let name = regex::Regex::new(r"cachet_[a-z0-9_]+").unwrap();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for m in name.find_iter(expr) {
                let base = m
                    .as_str()
                    .trim_end_matches("_bucket")
                    .trim_end_matches("_count")
                    .trim_end_matches("_sum");
                assert!(
                    exported.contains(base),
                    "panel {:?} uses {base}, which cachet does not export",
                    panel["title"]
                );
                used.insert(base.to_string());
            }
        }
    }
    // The dashboard covers the contract metrics of the design.
    for required in [
        "cachet_requests_total",
        "cachet_input_tokens_total",
        "cachet_output_tokens_total",
        "cachet_upstream_duration_seconds",
        "cachet_overhead_duration_seconds",
        "cachet_cache_savings_usd_total",
        "cachet_prefix_breaks_total",
        "cachet_cache_invalidations_total",
    ] {
        assert!(used.contains(required), "dashboard lacks {required}");
    }
}
