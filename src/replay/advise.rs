//! `cachet advise`: what each candidate policy would have saved on recorded sessions, and
//! where it would have cost more. Each candidate is an arm of `cachet replay` (the live
//! pipeline with the candidate's policy files, over the emulator's cache model) against
//! the client alone (the requests as recorded), so its figures are replay's, request for
//! request.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Serialize;

use super::{replay_all, ArmArg, ArmStats};
use crate::trace::{read_traces, Record};

/// The shipped policies that only change how a request is cached (never what the agent
/// reads): the default candidates, each applied to the sessions of the APIs it matches.
const SHIPPED: [(&str, &str); 3] = [
    (
        "anthropic-auto-breakpoints",
        include_str!("../../policies/anthropic-auto-breakpoints.toml"),
    ),
    (
        "stabilize-volatile",
        include_str!("../../policies/stabilize-volatile.toml"),
    ),
    (
        "openai-cache-key",
        include_str!("../../policies/openai-cache-key.toml"),
    ),
];

/// One session under one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionCost {
    pub session: String,
    /// What the client alone paid (the requests as recorded, on the cache model).
    pub client_cost_usd: f64,
    /// What the candidate would have paid, its keep-warms included.
    pub cost_usd: f64,
}

impl SessionCost {
    pub fn saving_usd(&self) -> f64 {
        self.client_cost_usd - self.cost_usd
    }
}

/// A candidate's advice.
#[derive(Debug, Clone, Serialize)]
pub struct Advice {
    pub candidate: String,
    /// Sessions of an API the candidate matches.
    pub sessions: usize,
    /// Of those, the ones it would have made cheaper.
    pub cheaper: usize,
    /// The client alone over those sessions, and the candidate (keep-warms after the
    /// sessions' last requests included).
    pub client_cost_usd: f64,
    pub cost_usd: f64,
    pub saving_usd: f64,
    /// The candidate's cache-read share of the input, over every replayed request.
    pub hit_ratio: f64,
    /// The sessions where it would have cost more, dearest first.
    pub costlier: Vec<SessionCost>,
    /// Every matched session.
    pub per_session: Vec<SessionCost>,
}

/// Differences below this are rounding, not a loss (USD).
const EPSILON_USD: f64 = 1e-9;

/// Each session's cost under `arm`, keep-warms before a request counted with it.
fn by_session(arm: &ArmStats, records: &[Record]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for &(i, cost) in &arm.per_request_cost {
        if let Some(r) = records.get(i) {
            *out.entry(r.session.clone()).or_insert(0.0) += cost;
        }
    }
    out
}

/// The advice for candidate `arm` against `client` (the same records as recorded), over
/// the sessions `matched` says it applies to.
pub fn advise(
    arm: &ArmStats,
    client: &ArmStats,
    records: &[Record],
    matched: &dyn Fn(&Record) -> bool,
) -> Advice {
    let theirs = by_session(client, records);
    let ours = by_session(arm, records);
    let mut applies: BTreeMap<&str, bool> = BTreeMap::new();
    for r in records.iter().filter(|r| r.endpoint().is_generation()) {
        *applies.entry(&r.session).or_default() |= matched(r);
    }
    let per_session: Vec<SessionCost> = (applies.iter())
        .filter(|(_, m)| **m)
        .map(|(s, _)| SessionCost {
            session: (*s).to_owned(),
            client_cost_usd: theirs.get(*s).copied().unwrap_or(0.0),
            cost_usd: ours.get(*s).copied().unwrap_or(0.0),
        })
        .collect();
    let trailing = arm.trailing_keep_warm_cost - client.trailing_keep_warm_cost;
    advice_of(arm.arm.clone(), per_session, trailing, arm.hit_ratio)
}

/// A candidate's advice from its cost and the client's on each session it applies to,
/// plus `trailing` (keep-warms after the sessions' last requests).
fn advice_of(
    candidate: String,
    per_session: Vec<SessionCost>,
    trailing: f64,
    hit_ratio: f64,
) -> Advice {
    let client_cost: f64 = per_session.iter().map(|s| s.client_cost_usd).sum();
    let cost: f64 = per_session.iter().map(|s| s.cost_usd).sum::<f64>() + trailing;
    let mut costlier: Vec<SessionCost> = (per_session.iter())
        .filter(|s| s.cost_usd > s.client_cost_usd + EPSILON_USD)
        .cloned()
        .collect();
    costlier.sort_by(|a, b| a.saving_usd().total_cmp(&b.saving_usd()));
    Advice {
        candidate,
        sessions: per_session.len(),
        cheaper: (per_session.iter())
            .filter(|s| s.saving_usd() > EPSILON_USD)
            .count(),
        client_cost_usd: client_cost,
        cost_usd: cost,
        saving_usd: client_cost - cost,
        hit_ratio,
        costlier,
        per_session,
    }
}

/// The candidates: those asked for, or the shipped ones written to `dir`.
pub(super) fn candidates(asked: &[String], dir: &std::path::Path) -> anyhow::Result<Vec<ArmArg>> {
    if !asked.is_empty() {
        let arms = (asked.iter())
            .map(|a| super::parse_arm(a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(a) = arms.iter().find(|a| a.policies.is_empty()) {
            bail!("candidate `{}` names no policy file", a.name);
        }
        return Ok(arms);
    }
    (SHIPPED.iter())
        .map(|(name, text)| {
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(ArmArg {
                name: (*name).to_owned(),
                policies: vec![path],
            })
        })
        .collect()
}

/// Whether a record's API is one the candidate's policies match (provider and endpoint).
fn matcher(arm: &ArmArg) -> anyhow::Result<impl Fn(&Record) -> bool> {
    let set = crate::policy::load_policies(&arm.policies, &[])
        .map_err(|errors| anyhow::anyhow!("{}", crate::policy::render_errors(&errors)))?;
    Ok(applies_to(&set))
}

/// Whether a record's API is one a policy of `set` matches (provider and endpoint).
pub(super) fn applies_to(
    set: &crate::policy::PolicySet,
) -> impl Fn(&Record) -> bool + Send + 'static {
    let routes: Vec<_> = (set.iter())
        .map(|p| (p.matcher.providers.clone(), p.matcher.endpoints.clone()))
        .collect();
    move |r: &Record| {
        let (provider, endpoint) = (r.provider(), r.endpoint());
        (routes.iter()).any(|(ps, es)| {
            (ps.is_empty() || ps.contains(&provider)) && (es.is_empty() || es.contains(&endpoint))
        })
    }
}

/// Every candidate's advice over `records`.
pub fn advise_all(
    records: &[Record],
    asked: &[String],
    model: Option<&str>,
) -> anyhow::Result<Vec<Advice>> {
    let dir = tempfile::tempdir().context("temporary policy folder")?;
    let arms = candidates(asked, dir.path())?;
    let client = ArmArg {
        name: "client".into(),
        policies: Vec::new(),
    };
    let hidden = indicatif::ProgressBar::hidden();
    let client = replay_all(records, std::slice::from_ref(&client), model, &hidden)?.remove(0);
    let mut out = Vec::new();
    for arm in &arms {
        let matched = matcher(arm).with_context(|| format!("candidate `{}`", arm.name))?;
        let stats = replay_all(records, std::slice::from_ref(arm), model, &hidden)?.remove(0);
        for msg in &stats.error_messages {
            eprintln!("warning: candidate `{}`: {msg}", arm.name);
        }
        out.push(advise(&stats, &client, records, &matched));
    }
    if asked.is_empty() {
        // The shipped candidates of APIs none of the sessions used say nothing.
        out.retain(|a| a.sessions > 0);
    }
    Ok(out)
}

/// The table: per candidate, on how many sessions it saves, what the client alone and the
/// candidate cost, the saving, and the sessions where it costs more.
pub fn table(advice: &[Advice]) -> String {
    let mut out = String::new();
    let width = advice
        .iter()
        .map(|a| a.candidate.len())
        .max()
        .unwrap_or(9)
        .max(9);
    let _ = writeln!(
        out,
        "{:width$}  {:>8}  {:>7}  {:>10}  {:>10}  saving",
        "candidate", "sessions", "cheaper", "client", "candidate"
    );
    for a in advice {
        let share = match a.client_cost_usd {
            c if c > 0.0 => format!(" ({:.1}%)", 100.0 * a.saving_usd / c),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{:width$}  {:>8}  {:>7}  {:>10}  {:>10}  {}{share}",
            a.candidate,
            a.sessions,
            a.cheaper,
            usd(a.client_cost_usd),
            usd(a.cost_usd),
            usd(a.saving_usd),
        );
    }
    for a in advice.iter().filter(|a| !a.costlier.is_empty()) {
        let n = a.costlier.len();
        let _ = write!(
            out,
            "\n{} costs more on {n} session{}:",
            a.candidate,
            if n == 1 { "" } else { "s" }
        );
        for s in a.costlier.iter().take(5) {
            let _ = write!(out, " {} +{}", s.session, usd(-s.saving_usd()));
        }
        if n > 5 {
            let _ = write!(out, ", {} more", n - 5);
        }
        out.push('\n');
    }
    out
}

fn usd(x: f64) -> String {
    if x < 0.0 {
        format!("-${:.4}", -x)
    } else {
        format!("${x:.4}")
    }
}

/// Every candidate's advice from the live what-if's figures kept beside a store: per
/// candidate, the sessions it applies to (keep-warms after a session's last request, which
/// the live what-if has not seen go out, are not counted).
pub fn advise_snapshot(snapshot: &crate::session::whatif::Snapshot) -> Vec<Advice> {
    (snapshot.candidates.iter().enumerate().skip(1))
        .map(|(i, name)| {
            let (mut read, mut input) = (0, 0);
            let per_session = (snapshot.sessions.iter())
                .filter(|(_, s)| s.applies.get(i).copied().unwrap_or(false))
                .map(|(id, s)| {
                    read += s.cache_read[i];
                    input += s.input[i];
                    SessionCost {
                        session: id.clone(),
                        client_cost_usd: s.cost_usd[0],
                        cost_usd: s.cost_usd[i],
                    }
                })
                .collect();
            let hit_ratio = if input == 0 {
                0.0
            } else {
                read as f64 / input as f64
            };
            advice_of(name.clone(), per_session, 0.0, hit_ratio)
        })
        // A candidate no session followed applies to says nothing.
        .filter(|a| a.sessions > 0)
        .collect()
}

/// The figures `cachet serve`'s live what-if keeps beside the embedded store `spec`.
fn read_snapshot(spec: &str) -> anyhow::Result<crate::session::whatif::Snapshot> {
    use crate::session::store::StoreSpec;
    let db = match StoreSpec::parse(spec)? {
        StoreSpec::Sqlite(db) => db,
        StoreSpec::Redis(_) => {
            bail!("--store: the what-if's figures are kept beside the embedded store only")
        }
    };
    let path = crate::session::whatif::snapshot_file(&db);
    let text = std::fs::read(&path).with_context(|| {
        format!(
            "{}: no figures of the live what-if (kept by `cachet serve` with sessions.whatif = true)",
            path.display()
        )
    })?;
    serde_json::from_slice(&text).with_context(|| format!("reading {}", path.display()))
}

/// `cachet advise TRACES...` or `cachet advise --store STORE`.
pub async fn run_advise(args: crate::cli::AdviseArgs) -> anyhow::Result<()> {
    crate::models::install_user_table(args.models.models.as_deref()).map_err(anyhow::Error::msg)?;
    let advice = match &args.store {
        Some(store) => advise_snapshot(&read_snapshot(store)?),
        None => {
            let paths: Vec<PathBuf> = args.traces.clone();
            let records = read_traces(&paths)?;
            if records.is_empty() {
                bail!("the traces hold no records");
            }
            advise_all(&records, &args.candidates, args.model.as_deref())?
        }
    };
    if args.json {
        let doc = serde_json::json!({ "candidates": advice });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", table(&advice));
    }
    Ok(())
}
