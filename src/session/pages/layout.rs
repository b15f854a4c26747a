//! The page shell both pages share: the document, its inline stylesheet and the legend's
//! colours. Nothing is loaded from elsewhere, so the pages work offline.

use maud::{html, Markup, PreEscaped, DOCTYPE};

/// The colour of each series, named as in the stylesheet and the chart.
pub const READ: &str = "#2e9e5b";
pub const WRITE: &str = "#f2a33a";
pub const WRITE_1H: &str = "#b3650b";
pub const UNCACHED: &str = "#a7b0ba";
pub const BREAK: &str = "#d93025";
pub const TTL: &str = "#8e44ad";

const STYLE: &str = r#"
:root{--muted:#5f6368;--line:#e0e3e7;--head:#f6f7f9;--link:#1a66d2;
--persisted:#1a73e8;--ephemeral:#6fa8f5;--replayed:#0f9d9a;--refused:#d93025;--stale:#80868b}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;padding:16px 20px 28px;color:#202124;background:#fff}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
h1{font-size:20px;margin:0 0 2px;font-weight:600;word-break:break-all}
.nav{font-size:13px;margin:0 0 6px}
.sub{color:var(--muted);margin:0 0 14px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 14px}
.card{border:1px solid var(--line);border-radius:8px;padding:6px 14px;min-width:112px}
.card b{display:block;font-size:19px;font-weight:600;white-space:nowrap}
.card span{color:var(--muted);font-size:12px}
.card.bad b{color:#c5221f}.card.good b{color:#188038}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:var(--muted);margin:0 0 6px;align-items:center}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.zoom{margin-left:auto}.zoom a,.zoom b{margin-left:6px}
.chart{display:flex;border:1px solid var(--line);border-radius:8px;padding:4px 0 2px 0;margin:0 0 16px}
.chart .axis{flex:none;display:block}
.chart .scroll{flex:1;min-width:0;overflow-x:auto;padding-right:14px}
.chart .plot{display:block;overflow:visible}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;fill:#5f6368}
svg text.row{font-weight:600}
.grid{stroke:#eceff1}.base{stroke:#9aa0a6}
.hover{fill:transparent}.req:hover .hover{fill:rgba(26,102,210,.10)}
.table-wrap{max-height:82vh;overflow:auto;border:1px solid var(--line);border-radius:8px}
table{border-collapse:separate;border-spacing:0;font-size:13px;font-variant-numeric:tabular-nums;width:100%}
th,td{padding:4px 6px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top;white-space:nowrap}
th{position:sticky;top:0;background:var(--head);font-weight:600;z-index:1}
th a{color:inherit}th.sorted{color:var(--link)}
.l{text-align:left}
td.events{white-space:normal;text-align:left;min-width:240px}
tfoot td{font-weight:600;border-top:2px solid #9aa0a6;background:var(--head);position:sticky;bottom:0}
tbody tr:hover{background:#fafbfc}
tr:target{background:#fff6d6}
tr.transform td{text-align:left;color:var(--muted);font-style:italic}
.dim{color:var(--muted)}
.tag{display:inline-block;padding:0 7px;border-radius:9px;font-size:11px;line-height:17px;color:#fff;font-style:normal;margin-right:4px}
.tag.persisted{background:var(--persisted)}.tag.ephemeral{background:var(--ephemeral)}
.tag.replayed{background:var(--replayed)}.tag.refused{background:var(--refused)}.tag.stale{background:var(--stale)}
.tag.status{background:#c5221f}
.brk{color:#c5221f}.brk b{font-weight:600}
.tag.blame.client{background:#1a73e8}.tag.blame.policy{background:#e37400}.tag.blame.provider{background:#5f6368}.tag.blame.unknown{background:#9aa0a6}
.advice{font-size:12px;color:var(--muted)}
.expired{color:#8e44ad;font-weight:600}.expired .ttl{display:block;font-size:11px}
.ev+.ev{margin-top:3px}
.inv{display:block;width:0;min-width:100%;font-size:11px;color:var(--muted);white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.err{display:block;font-size:12px;color:#c5221f}
details summary{cursor:pointer}
dl{display:grid;grid-template-columns:max-content 1fr;gap:1px 10px;margin:4px 0 2px 14px;font-size:12px}
dt{color:var(--muted)}dd{margin:0;white-space:pre-wrap;word-break:break-word}
.bar{display:inline-block;width:60px;height:8px;background:#eceff1;border-radius:4px;margin-left:6px;vertical-align:0;overflow:hidden}
.bar i{display:block;height:100%;background:#2e9e5b}
.empty{color:var(--muted);margin:24px 0}
"#;

/// A whole page.
pub fn page(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { (body) }
        }
    }
    .into_string()
}

/// A summary figure above the chart or table.
pub fn card(value: &str, label: &str, class: &str) -> Markup {
    html! {
        div class={ "card " (class) } { b { (value) } span { (label) } }
    }
}

/// One legend entry: a colour swatch and its meaning.
pub fn swatch(color: &str, label: &str) -> Markup {
    html! {
        span { span.sw style={ "background:" (color) } {} (label) }
    }
}
