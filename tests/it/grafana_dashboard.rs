//! The Grafana dashboard: every query uses only metrics cachet exports, filters by the
//! template variables wherever its metric carries their label, and returns data when a
//! real Prometheus scrapes a cachet under varied traffic.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

use crate::support::prometheus::Prometheus;
use crate::support::traffic::{drive, observed_cachet};
use crate::support::{metric_sum, metrics_text, wait_for_requests};

const VARIABLES: [&str; 4] = ["instance", "provider", "model", "variant"];

fn dashboard() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/grafana/dashboards/cachet.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// (panel title, expression) of every panel target.
fn panel_exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// The template variables' `label_values(selector, label)` queries, by variable name.
fn variable_queries(dashboard: &Value) -> BTreeMap<String, String> {
    dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["query"]["query"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn metric_names(expr: &str) -> Vec<String> {
    let name = Regex::new(r"\b(cachet|process)_[a-z0-9_]+").unwrap();
    name.find_iter(expr)
        .map(|m| m.as_str().to_string())
        .collect()
}

#[test]
fn dashboard_queries_use_only_exported_metrics() {
    let dashboard = dashboard();
    let exported: BTreeSet<String> = cachet::metrics::Metrics::new()
        .names()
        .iter()
        .cloned()
        .collect();
    let mut used = BTreeSet::new();
    let exprs = panel_exprs(&dashboard)
        .into_iter()
        .chain(variable_queries(&dashboard));
    for (title, expr) in exprs {
        for name in metric_names(&expr) {
            if name.starts_with("process_") {
                continue;
            }
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_count")
                .trim_end_matches("_sum")
                .to_string();
            assert!(
                exported.contains(&base),
                "{title:?} uses {base}, which cachet does not export"
            );
            used.insert(base);
        }
    }
    // The dashboard covers the contract metrics of the design.
    for required in [
        "cachet_requests_total",
        "cachet_input_tokens_total",
        "cachet_output_tokens_total",
        "cachet_cache_write_tokens_total",
        "cachet_upstream_duration_seconds",
        "cachet_overhead_duration_seconds",
        "cachet_cost_usd_total",
        "cachet_cache_savings_usd_total",
        "cachet_prefix_breaks_total",
        "cachet_cache_invalidations_total",
        "cachet_requests_in_flight",
        "cachet_build_info",
    ] {
        assert!(used.contains(required), "dashboard lacks {required}");
    }
}

#[test]
fn every_panel_has_units_and_the_variables_exist() {
    let dashboard = dashboard();
    let names: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for name in ["datasource", "instance", "provider", "model", "variant"] {
        assert!(names.contains(&name), "no `{name}` variable: {names:?}");
    }
    let mut stats = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        let defaults = &panel["fieldConfig"]["defaults"];
        assert!(
            defaults["unit"].as_str().is_some_and(|u| !u.is_empty()),
            "{title}: no unit"
        );
        // One unit per panel: every series of a panel shares its axis.
        assert!(panel["fieldConfig"]["overrides"]
            .as_array()
            .unwrap()
            .is_empty());
        if panel["type"] == "timeseries" {
            assert!(
                defaults["custom"]["axisLabel"]
                    .as_str()
                    .is_some_and(|l| !l.is_empty()),
                "{title}: no axis label"
            );
        }
        if panel["type"] == "stat" {
            stats.insert(title.to_string());
        }
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            assert!(
                expr.contains("instance=~\"$instance\""),
                "{title}: not filtered by instance: {expr}"
            );
        }
    }
    for stat in ["Savings", "Cost", "Cache hit ratio"] {
        assert!(stats.contains(stat), "no `{stat}` stat panel: {stats:?}");
    }
}

/// Grafana's substitutions: the variables as regular expressions, the intervals as ranges.
fn substitute(expr: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = expr
        .replace("$__rate_interval", "1m")
        .replace("$__range", "5m");
    for (name, value) in values {
        out = out.replace(&format!("${name}"), value);
    }
    out
}

/// `name{...}` selectors of an expression, with their matcher text.
fn selectors(expr: &str) -> Vec<(String, String)> {
    let selector = Regex::new(r"\b((?:cachet|process)_[a-z0-9_]+)(\{[^}]*\})?").unwrap();
    selector
        .captures_iter(expr)
        .map(|c| {
            (
                c[1].to_string(),
                c.get(2).map_or(String::new(), |m| m.as_str().to_string()),
            )
        })
        .collect()
}

fn finite(result: &[Value]) -> bool {
    result.iter().any(|r| {
        r["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(f64::is_finite)
    })
}

#[tokio::test]
async fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let o = observed_cachet().await;
    let target = o.proxy.admin_addr.to_string();
    let prometheus = Prometheus::start(&target).await;
    // Two rounds of traffic, each seen by Prometheus before the next: counters then move
    // between scrapes, so rates and quantiles have something to say.
    for round in 0..2 {
        drive(&o, round).await;
        wait_for_requests(&o.proxy, "obs-sonnet", 3 * (u64::from(round) + 1)).await;
        let local = metrics_text(&o.proxy).await;
        for name in ["cachet_requests_total", "cachet_prefix_breaks_total"] {
            let expected = metric_sum(&local, name, &[]);
            assert!(expected > 0.0, "{name}");
            prometheus
                .wait_for(&format!("sum({name})"), |r| {
                    r.first()
                        .and_then(|v| v["value"][1].as_str()?.parse::<f64>().ok())
                        == Some(expected)
                })
                .await;
        }
    }

    let dashboard = dashboard();
    let known: BTreeSet<String> = prometheus
        .api("/api/v1/label/__name__/values", &[])
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // Which variables apply to which metric: the labels its series carry.
    let mut labels_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let exprs = panel_exprs(&dashboard);
    for (title, expr) in &exprs {
        for (name, matchers) in selectors(expr) {
            assert!(known.contains(&name), "{title}: unknown metric {name}");
            let labels = labels_of.entry(name.clone()).or_default();
            if labels.is_empty() {
                let series = prometheus
                    .api("/api/v1/series", &[("match[]", name.as_str())])
                    .await;
                for s in series.as_array().unwrap() {
                    labels.extend(s.as_object().unwrap().keys().cloned());
                }
            }
            for var in VARIABLES.iter().filter(|v| labels.contains(**v)) {
                assert!(
                    matchers.contains(&format!("{var}=~\"${var}\"")),
                    "{title}: {name} carries `{var}` but the query ignores ${var}: {expr}"
                );
            }
        }
    }

    let all: BTreeMap<&str, String> = VARIABLES.iter().map(|v| (*v, ".*".to_string())).collect();
    // One concrete choice per variable, as a user would pick it.
    let one: BTreeMap<&str, String> = [
        ("instance", target.clone()),
        ("provider", "anthropic".to_string()),
        ("model", "claude-sonnet-4-5".to_string()),
        ("variant", "none".to_string()),
    ]
    .into_iter()
    .collect();
    for values in [&all, &one] {
        for (name, query) in variable_queries(&dashboard) {
            let query = substitute(&query, values);
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("{name}: {query}"));
            let (selector, label) = inner.rsplit_once(',').unwrap();
            let series = prometheus
                .api("/api/v1/series", &[("match[]", selector.trim())])
                .await;
            assert!(
                series
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s.get(label.trim()).is_some()),
                "variable {name} has no values: {query}"
            );
        }
        for (title, expr) in &exprs {
            let query = substitute(expr, values);
            let data = prometheus
                .query(&query)
                .await
                .unwrap_or_else(|e| panic!("{title}: {e}\n{query}"));
            let result = data["result"].as_array().unwrap();
            assert!(
                !result.is_empty() && finite(result),
                "{title}: no data for {query}\n{data}"
            );
        }
    }
    o.proxy.shutdown().await;
}
