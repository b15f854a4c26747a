//! The session timeline as a small HTML page (`GET /sessions/{id}/timeline` on the admin
//! listener): per request, tokens read from cache, written and uncached as a stacked bar,
//! with prefix breaks and the patches made in between. No scripts, no external assets.

use std::fmt::Write;

use super::entry::Entry;
use super::log::Entries;
use super::store::{SessionStore, StoreResult};

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page for session `id`, or `None` for an unknown session.
pub async fn timeline_html(store: &dyn SessionStore, id: &str) -> StoreResult<Option<String>> {
    let log = store.load(id).await?;
    if log.is_empty() {
        return Ok(None);
    }
    Ok(Some(render(id, &log)))
}

const BAR_WIDTH: usize = 14;
const CHART_HEIGHT: f64 = 160.0;

pub fn render(id: &str, log: &(impl Entries + ?Sized)) -> String {
    let requests: Vec<_> = log
        .entries()
        .filter_map(|e| match e {
            Entry::Request(r) => Some(r),
            _ => None,
        })
        .collect();
    let total = |r: &&super::entry::RequestRecord| r.usage.map_or(0, |u| u.total_input());
    let max = requests.iter().map(total).max().unwrap_or(0).max(1) as f64;
    let mut svg = String::new();
    let width = (requests.len() * (BAR_WIDTH + 4)).max(100);
    let _ = write!(
        svg,
        r#"<svg width="{width}" height="{h}" role="img" aria-label="tokens per request">"#,
        h = CHART_HEIGHT as usize + 4
    );
    for (i, r) in requests.iter().enumerate() {
        let u = r.usage.unwrap_or_default();
        let x = i * (BAR_WIDTH + 4);
        let mut y = CHART_HEIGHT;
        for (n, color) in [
            (u.cache_read, "#3a9a5b"),
            (u.cache_write, "#e39b2d"),
            (u.uncached, "#9aa0a6"),
        ] {
            let h = n as f64 / max * CHART_HEIGHT;
            y -= h;
            let _ = write!(
                svg,
                r#"<rect x="{x}" y="{y:.1}" width="{BAR_WIDTH}" height="{h:.1}" fill="{color}"/>"#
            );
        }
        if r.diagnosis.is_some() {
            let _ = write!(
                svg,
                r##"<rect x="{x}" y="{}" width="{BAR_WIDTH}" height="3" fill="#c0392b"/>"##,
                CHART_HEIGHT as usize + 1
            );
        }
    }
    svg.push_str("</svg>");

    let mut rows = String::new();
    for entry in log.entries() {
        match entry {
            Entry::Request(r) => {
                let u = r.usage.unwrap_or_default();
                let breaks = r
                    .diagnosis
                    .as_ref()
                    .map(|d| format!("{} {}: {}", d.section.label(), d.reason.label(), d.detail))
                    .unwrap_or_default();
                let _ = write!(
                    rows,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    r.request_index,
                    escape(&r.model),
                    r.status.map_or(String::new(), |s| s.to_string()),
                    u.cache_read,
                    u.cache_write,
                    u.uncached,
                    u.output,
                    escape(r.variant.as_deref().unwrap_or("none")),
                    escape(&breaks),
                );
            }
            Entry::ContextTransform(t) => {
                let ops: Vec<&str> = t.patch.iter().map(|op| op.name()).collect();
                let _ = write!(
                    rows,
                    r#"<tr class="patch"><td colspan="9">patch by {} ({}): {}</td></tr>"#,
                    escape(&t.transformer),
                    escape(&t.reason),
                    escape(&ops.join(", ")),
                );
            }
            Entry::Unknown => {}
        }
    }
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>cachet session {id}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{padding:2px 8px;text-align:right;border-bottom:1px solid #ddd}}tr.patch td{{text-align:left;color:#555;font-style:italic}}</style></head>
<body><h1>Session {id}</h1>
<p>{n} requests. Bars: <span style="color:#3a9a5b">read from cache</span>, <span style="color:#e39b2d">written to cache</span>, <span style="color:#9aa0a6">uncached</span>; a red mark is a prefix break.</p>
{svg}
<table><tr><th>request</th><th>model</th><th>status</th><th>cache read</th><th>cache write</th><th>uncached</th><th>output</th><th>variant</th><th>break</th></tr>
{rows}</table></body></html>
"#,
        id = escape(id),
        n = requests.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::anchor::Anchor;
    use crate::session::entry::{ContextTransform, ENTRY_VERSION};

    #[test]
    fn names_from_policies_and_hooks_are_escaped() {
        let log = vec![Entry::ContextTransform(ContextTransform {
            version: ENTRY_VERSION,
            time: 0,
            transformer: "<script>x</script>".into(),
            reason: "before_request".into(),
            anchor: Anchor {
                count: 0,
                hash: String::new(),
            },
            patch: Vec::new(),
            display: None,
            request_index: Some(0),
        })];
        let html = render("s&1", &log);
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(!html.contains("<script>"));
        assert!(html.contains("Session s&amp;1"));
    }
}
