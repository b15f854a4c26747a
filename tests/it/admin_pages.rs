//! The admin pages in a real browser. Headless Chromium opens the sessions overview and
//! the timelines of sessions driven through cachet and the emulator, and the test reads the
//! rendered DOM: the rows, the totals (against what the emulator accounted), a prefix break
//! with its reason, a gap past the markers' TTL, every kind of patch, escaping, and a
//! layout that fits a 1280 px window. Screenshots are left in target/tmp/admin-pages/.

use serde_json::{json, Value};

use cachet::measure::breaks::SectionName;
use cachet::measure::{BreakReason, Diagnosis, Mark, MarkTtl};
use cachet::session::{Entry, PatchEvent, PatchOutcome, RequestRecord, ENTRY_VERSION};
use cachet::usage::Usage;

use crate::support::browser::Browser;
use crate::support::client;
use crate::support::traffic::{drive, observed_cachet_with, Observed};

/// The long session's model: dated, so that a wrapping name would show.
const LONG_MODEL: &str = "claude-opus-4-5-20251101";
const LONG: &str = "long-80";
const LONG_REQUESTS: usize = 80;
/// The request (numbered from 1) whose system prompt changes.
const LONG_BREAK: usize = 60;
const IDLE: &str = "idle";

/// The rendered timeline, read in the browser: each row's cells by column header, the
/// events cell's patch tags and break details, the chart's marks and the layout.
const TIMELINE_FACTS: &str = r#"(() => {
  const text = el => el ? el.textContent.trim() : null;
  const head = [...document.querySelectorAll('table.requests thead th')].map(text);
  const cells = tr => {
    const out = {}; let col = 0;
    for (const td of tr.cells) { out[head[col]] = {text: text(td), cls: td.className}; col += td.colSpan; }
    return out;
  };
  const rows = [...document.querySelectorAll('table.requests tbody tr[id]')].map(tr => {
    const ev = tr.querySelector('td.events');
    return {
      id: tr.id, cells: cells(tr),
      tags: [...ev.querySelectorAll('.tag')].map(t => ({tag: text(t), line: text(t.parentElement)})),
      breaks: [...ev.querySelectorAll('details.brk')].map(d => ({
        summary: text(d.querySelector('summary')),
        facts: Object.fromEntries([...d.querySelectorAll('dt')].map(dt => [text(dt), text(dt.nextElementSibling)])),
      })),
    };
  });
  const scroll = document.querySelector('.chart .scroll');
  const wrap = document.querySelector('.table-wrap');
  const lastBar = Math.max(...[...document.querySelectorAll('svg.plot g.req rect:not(.hover)')]
    .map(r => r.getBoundingClientRect().right));
  const lines = td => { const r = document.createRange(); r.selectNodeContents(td);
    return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; };
  const modelCol = head.indexOf('model');
  return {
    contentType: document.contentType,
    title: document.title,
    head, rows,
    totals: cells(document.querySelector('table.requests tfoot tr')),
    bars: document.querySelectorAll('svg.plot g.req').length,
    breakMarks: [...document.querySelectorAll('svg.plot g.mark.brk title')].map(text),
    ttlMarks: [...document.querySelectorAll('svg.plot g.mark.ttl title')].map(text),
    xLabels: [...document.querySelectorAll('svg.plot text.x')].map(text),
    layout: {
      scrollWidth: scroll.scrollWidth, clientWidth: scroll.clientWidth,
      tableScrollWidth: wrap.scrollWidth, tableClientWidth: wrap.clientWidth,
      scrollRight: scroll.getBoundingClientRect().right, lastBar,
      pageScrollWidth: document.documentElement.scrollWidth, windowWidth: innerWidth,
      modelLines: [...document.querySelectorAll('table.requests tbody tr[id]')]
        .map(tr => lines(tr.cells[modelCol])),
    },
    external: performance.getEntriesByType('resource').map(e => e.name)
      .concat([...document.querySelectorAll('script[src], link[href], img[src]')].map(e => e.outerHTML)),
    scripts: document.scripts.length,
  };
})()"#;

const OVERVIEW_FACTS: &str = r#"(() => {
  const text = el => el ? el.textContent.trim() : null;
  const head = [...document.querySelectorAll('table.sessions thead th')].map(text);
  const rows = [...document.querySelectorAll('table.sessions tbody tr')].map(tr => {
    const out = {};
    [...tr.cells].forEach((td, i) => out[head[i].replace(/ [▲▼]$/, '')] = text(td));
    out.href = tr.querySelector('a').getAttribute('href');
    return out;
  });
  const wrap = document.querySelector('.table-wrap');
  return {contentType: document.contentType, head, rows, search: location.search,
    fits: wrap.scrollWidth <= wrap.clientWidth && document.documentElement.scrollWidth <= innerWidth,
    external: performance.getEntriesByType('resource').map(e => e.name)};
})()"#;

fn tokens(cell: &Value) -> u64 {
    let text = cell["text"].as_str().unwrap_or_default().replace(',', "");
    text.parse()
        .unwrap_or_else(|_| panic!("not a token count: {cell}"))
}

fn dollars(text: &str) -> Option<f64> {
    let text = text.split_whitespace().next()?;
    let negative = text.starts_with('−');
    let value: f64 = text
        .trim_start_matches('−')
        .strip_prefix('$')?
        .parse()
        .ok()?;
    Some(if negative { -value } else { value })
}

fn cell<'a>(row: &'a Value, column: &str) -> &'a str {
    row["cells"][column]["text"].as_str().unwrap_or_default()
}

/// The chart and the table fit the window: neither scrolls sideways, the last bar is in
/// view, and every model name stays on one line.
fn assert_fits(layout: &Value) {
    let at_most = |a: &str, b: &str| layout[a].as_f64() <= layout[b].as_f64();
    assert!(
        at_most("scrollWidth", "clientWidth"),
        "chart scrolls: {layout}"
    );
    assert!(
        at_most("lastBar", "scrollRight"),
        "last bar cut off: {layout}"
    );
    assert!(
        at_most("tableScrollWidth", "tableClientWidth"),
        "table scrolls: {layout}"
    );
    assert!(
        at_most("pageScrollWidth", "windowWidth"),
        "page scrolls: {layout}"
    );
    assert!(
        layout["modelLines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n == 1),
        "a model name wraps: {layout}"
    );
}

fn long_system(version: &str) -> String {
    (0..700)
        .map(|i| format!("Guideline {i}: keep the {version} conventions of this repository."))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A coding session of `LONG_REQUESTS` requests in Claude Code's shape (a marker on the
/// system prompt and on the last message); the system prompt changes at `LONG_BREAK`.
async fn drive_long_session(o: &Observed) {
    let mut messages: Vec<Value> = Vec::new();
    for n in 1..=LONG_REQUESTS {
        let version = if n < LONG_BREAK { "old" } else { "new" };
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": format!("Step {n}: go on.")}]}));
        let mut sent = messages.clone();
        if let Some(last) = sent.last_mut() {
            last["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        }
        let body = json!({"model": LONG_MODEL, "max_tokens": 64,
            "system": [{"type": "text", "text": long_system(version), "cache_control": {"type": "ephemeral"}}],
            "messages": sent});
        let r = client()
            .post(format!("http://{}/v1/messages", o.proxy.addr))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("x-cachet-session", LONG)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let answer: Value = r.json().await.unwrap();
        messages.push(json!({"role": "assistant", "content": answer["content"].clone()}));
        // Each entry is written in a task of its own once the answer has ended; the next
        // request waits for it, so the log holds the requests in the order they were sent
        // (back-to-back requests of a monitored session can be recorded out of order).
        crate::support::wait_for_requests(&o.proxy, LONG, n as u64).await;
    }
}

fn marks(ttl: MarkTtl) -> Vec<Mark> {
    vec![
        Mark {
            block: 2,
            message: None,
            ttl,
        },
        Mark {
            block: 4,
            message: Some(1),
            ttl,
        },
    ]
}

fn usage(read: u64, write: u64, write_1h: u64, uncached: u64, output: u64) -> Option<Usage> {
    Some(Usage {
        cache_read: read,
        cache_write: write,
        cache_write_5m: write - write_1h,
        cache_write_1h: write_1h,
        uncached,
        output,
        ..Usage::default()
    })
}

fn patch(transformer: &str, reason: &str, outcome: PatchOutcome) -> PatchEvent {
    PatchEvent {
        transformer: transformer.into(),
        reason: reason.into(),
        outcome,
        ops: vec!["system_part_set".into()],
        invalidate: Vec::new(),
        error: None,
        parts: Vec::new(),
        count: 1,
    }
}

/// A session with idle gaps, written straight into the store: the proxy records wall
/// time, so a real 7-minute pause would make the test take 7 minutes. Claude Code's shape:
/// 5m markers, then 1h markers, a title request in a lane of its own, an overloaded
/// answer, every patch outcome, and the provider's own diagnosis beside cachet's.
fn idle_session(t0: u64) -> Vec<Entry> {
    const MIN: u64 = 60_000;
    let request = |index: u64, time: u64| RequestRecord {
        version: ENTRY_VERSION,
        time,
        request_index: index,
        turn_index: Some(index),
        model: "claude-sonnet-4-5".into(),
        provider: "anthropic".into(),
        endpoint: "messages".into(),
        client: Some("claude-code".into()),
        marks: marks(MarkTtl::FiveMinutes),
        status: Some(200),
        ..RequestRecord::default()
    };
    let mut r1 = request(0, t0);
    r1.usage = usage(0, 4200, 0, 12, 80);
    r1.patches = vec![PatchEvent {
        invalidate: vec!["memory refreshed".into()],
        ..patch("memory", "before_request", PatchOutcome::Persisted)
    }];
    let mut r2 = request(1, t0 + 2 * MIN);
    r2.usage = usage(4200, 300, 0, 10, 64);
    r2.patches = vec![
        patch("memory", "replay", PatchOutcome::Replayed),
        patch("clock", "ephemeral", PatchOutcome::Ephemeral),
    ];
    // 7 minutes idle: past the 5m markers of request 2.
    let mut r3 = request(2, t0 + 9 * MIN);
    r3.usage = usage(0, 4560, 0, 10, 70);
    r3.diagnosis = Some(Diagnosis {
        section: SectionName::Messages,
        reason: BreakReason::TtlExpired,
        part: None,
        tool: None,
        message_index: Some(1),
        expected_read: Some(4500),
        read: 0,
        detail: "420 s since the previous request, past its 300 s marker".into(),
        blame: None,
    });
    r3.patches = vec![PatchEvent {
        error: Some("system_part_set on a cached part without invalidateCacheReason".into()),
        ..patch("<b>hook</b> & co", "before_request", PatchOutcome::Refused)
    }];
    // From here on the client marks with a 1h TTL.
    let mut r4 = request(3, t0 + 9 * MIN + 40_000);
    r4.marks = marks(MarkTtl::OneHour);
    r4.usage = usage(4560, 200, 200, 10, 50);
    r4.patches = vec![patch("memory", "replay", PatchOutcome::Stale)];
    // 20 minutes idle: within the 1h TTL, but the system prompt changed.
    let mut r5 = request(4, t0 + 29 * MIN + 40_000);
    r5.marks = marks(MarkTtl::OneHour);
    r5.usage = usage(0, 4700, 4700, 10, 90);
    r5.diagnosis = Some(Diagnosis {
        section: SectionName::System,
        reason: BreakReason::SystemChanged,
        part: Some("environment".into()),
        tool: None,
        message_index: None,
        expected_read: None,
        read: 0,
        detail: "system part `environment` changed".into(),
        blame: None,
    });
    r5.provider_diagnosis = Some(json!({"cache_miss_reason":
        {"type": "system_changed", "cache_missed_input_tokens": 4480}}));
    // A title request of a model missing from the price table, in a lane of its own.
    let mut r6 = request(5, t0 + 29 * MIN + 45_000);
    r6.model = "acme-title-mini".into();
    r6.lane = 1;
    r6.marks = Vec::new();
    r6.usage = usage(0, 0, 0, 300, 12);
    // Overloaded: no usage.
    let mut r7 = request(6, t0 + 31 * MIN);
    r7.status = Some(529);
    vec![r1, r2, r3, r4, r5, r6, r7]
        .into_iter()
        .map(Entry::Request)
        .collect()
}

async fn session_json(o: &Observed, id: &str) -> Value {
    client()
        .get(format!("http://{}/sessions/{id}", o.proxy.admin_addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-pages")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_and_overview_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store");
    let t0 = cachet::session::now_ms() - 3 * 3_600_000;
    {
        let store = cachet::session::open_store(store_path.to_str().unwrap())
            .await
            .unwrap();
        store.append(IDLE, &idle_session(t0)).await.unwrap();
    }
    let store = store_path.to_string_lossy().into_owned();
    let o = observed_cachet_with(move |c| c.sessions.store = store).await;
    drive(&o, 0).await;
    drive(&o, 1).await;
    drive_long_session(&o).await;
    let long_log = session_json(&o, LONG).await;
    let admin = format!("http://{}", o.proxy.admin_addr);
    // What the provider accounted for the long session (its model is used nowhere else).
    let accounted: Vec<_> = o
        .emulator
        .accounted()
        .into_iter()
        .filter(|a| a.model == LONG_MODEL)
        .collect();
    assert_eq!(accounted.len(), LONG_REQUESTS);
    let listed: Value = client()
        .get(format!("{admin}/sessions"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut entries_of = std::collections::HashMap::new();
    for s in listed["sessions"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap().to_owned();
        let log = session_json(&o, &id).await;
        entries_of.insert(id, log["requests"].as_u64().unwrap());
    }

    let (long, idle, overview, by_cost, clicked) = tokio::task::block_in_place(|| {
        let mut b = Browser::launch(1280, 900);
        b.open(&format!("{admin}/sessions/{LONG}/timeline"));
        let long = b.eval(TIMELINE_FACTS);
        b.screenshot(&shots().join("timeline-80.png"));
        b.open(&format!("{admin}/sessions/{IDLE}/timeline"));
        let idle = b.eval(TIMELINE_FACTS);
        b.screenshot(&shots().join("timeline-idle.png"));
        // A real navigation: the browser's own Accept header asks for the page.
        b.open(&format!("{admin}/sessions"));
        let overview = b.eval(OVERVIEW_FACTS);
        b.screenshot(&shots().join("overview.png"));
        // Sorting is a link in the column header; following a session's link opens its timeline.
        b.follow("th a[href*='sort=cost']");
        let by_cost = b.eval(OVERVIEW_FACTS);
        b.follow(&format!("a[href='/sessions/{LONG}/timeline']"));
        let clicked = b.eval("document.querySelector('h1').textContent");
        (long, idle, overview, by_cost, clicked)
    });

    // The long session: one row and one bar per request, in order, labelled from 1.
    assert_eq!(long["contentType"], "text/html");
    let rows = long["rows"].as_array().unwrap();
    assert_eq!(rows.len(), LONG_REQUESTS);
    assert_eq!(long["bars"], LONG_REQUESTS);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["id"], format!("r{}", i + 1));
        assert_eq!(cell(row, "model"), LONG_MODEL);
    }
    assert_eq!(long["xLabels"][0], "1");
    // The totals row adds up the rows, and the rows are what the provider accounted.
    let totals = &long["totals"];
    for (column, provider) in [
        (
            "read",
            accounted
                .iter()
                .map(|a| a.accounting.cache_read)
                .sum::<u64>(),
        ),
        (
            "written",
            accounted.iter().map(|a| a.accounting.cache_write()).sum(),
        ),
        (
            "uncached",
            accounted
                .iter()
                .map(|a| {
                    a.accounting.input_tokens - a.accounting.cache_read - a.accounting.cache_write()
                })
                .sum(),
        ),
        ("output", accounted.iter().map(|a| a.output_tokens).sum()),
    ] {
        let rows_sum: u64 = rows.iter().map(|r| tokens(&r["cells"][column])).sum();
        assert_eq!(tokens(&totals[column]), rows_sum, "{column} total");
        assert_eq!(
            rows_sum, provider,
            "{column}: the page and the emulator agree"
        );
    }
    let read = tokens(&totals["read"]) as f64;
    let input = read + tokens(&totals["written"]) as f64 + tokens(&totals["uncached"]) as f64;
    assert_eq!(
        totals["hit"]["text"],
        format!("{:.0}%", 100.0 * read / input)
    );
    let cost_sum: f64 = rows.iter().filter_map(|r| dollars(cell(r, "cost"))).sum();
    let cost_total = dollars(totals["cost"]["text"].as_str().unwrap()).unwrap();
    assert!(cost_total > 0.0);
    // Rows are rounded to $0.0001 each.
    assert!((cost_total - cost_sum).abs() <= 0.0001 * LONG_REQUESTS as f64);
    // The one break: where the system prompt changed, with its section and reason, in the
    // table, in the chart, and in the session log.
    let broken: Vec<&Value> = rows
        .iter()
        .filter(|r| !r["breaks"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0]["id"], format!("r{LONG_BREAK}"));
    let b = &broken[0]["breaks"][0];
    assert!(
        b["summary"]
            .as_str()
            .unwrap()
            .starts_with("clientsystem_changed in system"),
        "the blame's tag, then the reason: {b}"
    );
    assert_eq!(b["facts"]["reason"], "system_changed");
    assert_eq!(b["facts"]["blame"], "client: system part `base`");
    assert_eq!(b["facts"]["read"], cell(broken[0], "read"));
    let logged = long_log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["request_index"] == LONG_BREAK as u64 - 1)
        .unwrap();
    assert_eq!(logged["diagnosis"]["reason"], "system_changed");
    assert_eq!(long["breakMarks"].as_array().unwrap().len(), 1);
    assert!(long["breakMarks"][0]
        .as_str()
        .unwrap()
        .starts_with(&format!("#{LONG_BREAK} break: system_changed")));
    // 80 requests fit a 1280 px window: nothing scrolls or is cut off, and no model name
    // wraps.
    assert_fits(&long["layout"]);
    // Offline: nothing is fetched, nothing runs.
    assert_eq!(long["external"], json!([]));
    assert_eq!(long["scripts"], 0);

    // The idle session: gaps against the markers' TTL.
    let rows = idle["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    let gap = |n: usize| &rows[n - 1]["cells"]["gap"];
    assert_eq!(gap(1)["text"], "–", "the first request has no gap");
    assert_eq!(gap(2)["text"], "2m 00s");
    assert!(!gap(2)["cls"].as_str().unwrap().contains("expired"));
    assert_eq!(gap(3)["text"], "7m 00s past 5m TTL");
    assert!(gap(3)["cls"].as_str().unwrap().contains("expired"));
    assert_eq!(gap(5)["text"], "20m 00s", "within the 1h markers' TTL");
    assert!(!gap(5)["cls"].as_str().unwrap().contains("expired"));
    assert_eq!(gap(6)["text"], "–", "the first request of lane 1");
    assert_eq!(idle["ttlMarks"].as_array().unwrap().len(), 1);
    assert!(idle["ttlMarks"][0]
        .as_str()
        .unwrap()
        .starts_with("#3: 7m 00s"));
    let breaks = |n: usize| &rows[n - 1]["breaks"];
    assert_eq!(breaks(3)[0]["facts"]["reason"], "ttl_expired");
    assert_eq!(breaks(3)[0]["facts"]["expected read"], "4,500");
    // cachet's diagnosis and the provider's own, side by side.
    assert_eq!(breaks(5)[0]["facts"]["reason"], "system_changed");
    assert_eq!(breaks(5)[0]["facts"]["system part"], "environment");
    assert_eq!(
        breaks(5)[0]["facts"]["provider says"],
        "system_changed, 4,480 tokens missed"
    );
    // Every patch outcome, with its transformer and reason; names from hooks stay text.
    let tags: Vec<(String, String)> = rows
        .iter()
        .flat_map(|r| r["tags"].as_array().unwrap().clone())
        .map(|t| {
            (
                t["tag"].as_str().unwrap().to_owned(),
                t["line"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (outcome, line) in [
        ("persisted", "memory (before_request): system_part_setinvalidates the cache: memory refreshed"),
        ("replayed", "memory (replay): system_part_set"),
        ("ephemeral", "clock (ephemeral): system_part_set"),
        ("refused", "<b>hook</b> & co (before_request): system_part_setsystem_part_set on a cached part without invalidateCacheReason"),
        ("stale", "memory (replay): system_part_set"),
    ] {
        assert!(
            tags.iter().any(|(t, l)| t == outcome && *l == format!("{outcome}{line}")),
            "{outcome}: {tags:?}"
        );
    }
    // Unknown model: no price rather than a wrong one; the failed request shows its status.
    assert_eq!(cell(&rows[5], "cost"), "unpriced");
    assert!(idle["totals"]["cost"]["text"]
        .as_str()
        .unwrap()
        .ends_with("+ 1 unpriced"));
    assert!(rows[6]["tags"][0]["tag"] == "status 529", "{}", rows[6]);
    assert_eq!(cell(&rows[6], "read"), "–");
    assert_eq!(idle["totals"]["lane"]["text"], "2");
    assert_fits(&idle["layout"]);

    // The overview: every session of the JSON list, with its request count, linked.
    assert_eq!(overview["contentType"], "text/html");
    let listed_rows = overview["rows"].as_array().unwrap();
    assert_eq!(listed_rows.len(), entries_of.len());
    for row in listed_rows {
        let id = row["session"].as_str().unwrap();
        assert_eq!(row["href"], format!("/sessions/{id}/timeline"));
        assert_eq!(
            row["requests"].as_str().unwrap().parse::<u64>().unwrap(),
            entries_of[id],
            "{id}"
        );
    }
    let long_row = listed_rows.iter().find(|r| r["session"] == LONG).unwrap();
    assert_eq!(long_row["model"], LONG_MODEL);
    // The count, then who can fix them.
    assert_eq!(long_row["breaks"], "11 client");
    assert_eq!(long_row["hit ratio"], long["totals"]["hit"]["text"]);
    assert_eq!(long_row["cost"], long["totals"]["cost"]["text"]);
    let idle_row = listed_rows.iter().find(|r| r["session"] == IDLE).unwrap();
    assert_eq!(idle_row["client"], "claude-code");
    assert_eq!(idle_row["breaks"], "21 client · 1 provider");
    assert_eq!(overview["external"], json!([]));
    assert_eq!(overview["fits"], true, "the overview fits a 1280 px window");
    // Sorted by cost, largest first; sessions with nothing priced last.
    assert!(by_cost["search"].as_str().unwrap().contains("sort=cost"));
    let costs: Vec<Option<f64>> = by_cost["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| dollars(r["cost"].as_str().unwrap()))
        .collect();
    let priced: Vec<f64> = costs.iter().map_while(|c| *c).collect();
    assert!(priced.windows(2).all(|w| w[0] >= w[1]), "{costs:?}");
    assert!(
        costs[priced.len()..].iter().all(Option::is_none),
        "{costs:?}"
    );
    assert_eq!(clicked, format!("Session {LONG}"));

    for shot in ["timeline-80.png", "timeline-idle.png", "overview.png"] {
        let png = std::fs::read(shots().join(shot)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot}");
    }
    o.proxy.shutdown().await;
}

/// Without a browser's `Accept`, `GET /sessions` is the JSON it always was.
#[tokio::test]
async fn sessions_stay_json_for_everyone_but_browsers() {
    let o = observed_cachet_with(|_| {}).await;
    drive(&o, 0).await;
    let admin = format!("http://{}", o.proxy.admin_addr);
    for accept in [None, Some("application/json"), Some("*/*")] {
        let mut req = client().get(format!("{admin}/sessions?limit=2"));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        let sessions = v["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 2, "limit applies");
        let keys: Vec<&String> = sessions[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "created", "updated", "entries", "requests"]);
    }
    let r = client()
        .get(format!("{admin}/sessions?limit=2"))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
    assert_eq!(r.headers()["vary"], "accept");
    let page = r.text().await.unwrap();
    assert_eq!(page.matches("/timeline\">").count(), 2, "limit applies");
    // A path that once sliced out of bounds is an unknown session, not a crash.
    let r = client()
        .get(format!("{admin}/sessions/timeline"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    o.proxy.shutdown().await;
}
