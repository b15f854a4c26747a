//! `cachet replay`: recorded requests (see `crate::trace`), in time order, through each
//! arm's shaping and the emulator's cache model, compared side by side.

pub mod advise;
pub mod chart;
pub mod guard;
pub mod held;
pub mod ideal;
pub mod keep_warm;
pub mod live;
pub mod output;
pub mod pipeline_shaper;
pub mod run;
pub mod shaper;
pub mod whatif;

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::trace::{read_traces, Record};
pub use pipeline_shaper::PipelineShaper;
pub use run::{replay_arm, ArmStats};
pub use shaper::{AsRecorded, Shaped, Shaper};

use crate::cli::ReplayArgs;

/// Show a progress bar from this many record × arm steps on.
const PROGRESS_FROM: u64 = 500;

/// One `--arm NAME=POLICY_FILE[,POLICY_FILE...]`; no files means "as recorded".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmArg {
    pub name: String,
    pub policies: Vec<PathBuf>,
}

pub fn parse_arm(text: &str) -> anyhow::Result<ArmArg> {
    let (name, files) = match text.split_once('=') {
        Some((n, f)) => (n.trim(), f),
        None => (text.trim(), ""),
    };
    if name.is_empty() {
        bail!("arm `{text}` has no name (expected NAME=POLICY_FILE[,POLICY_FILE...])");
    }
    let policies = files
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(PathBuf::from)
        .collect();
    Ok(ArmArg {
        name: name.to_string(),
        policies,
    })
}

/// The shaper of an arm: as recorded, or the live pipeline with its policy files.
pub fn shaper_for(arm: &ArmArg) -> anyhow::Result<Box<dyn Shaper>> {
    if arm.policies.is_empty() {
        return Ok(Box::new(AsRecorded));
    }
    Ok(Box::new(PipelineShaper::start(&arm.policies)?))
}

/// Replay `records` through every arm.
pub fn replay_all(
    records: &[Record],
    arms: &[ArmArg],
    model: Option<&str>,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<ArmStats>> {
    let mut out = Vec::new();
    for arm in arms {
        let mut shaper = shaper_for(arm).with_context(|| format!("arm `{}`", arm.name))?;
        progress.set_message(arm.name.clone());
        let stats = replay_arm(&arm.name, records, shaper.as_mut(), model, &mut || {
            progress.inc(1)
        });
        out.push(stats);
    }
    Ok(out)
}

pub async fn run_replay(args: ReplayArgs) -> anyhow::Result<()> {
    crate::models::install_user_table(args.models.models.as_deref()).map_err(anyhow::Error::msg)?;
    let mut arms = args
        .arms
        .iter()
        .map(|a| parse_arm(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if arms.is_empty() {
        arms.push(ArmArg {
            name: "recorded".into(),
            policies: Vec::new(),
        });
    }
    let records = read_traces(&args.traces)?;
    if records.is_empty() {
        bail!("the traces hold no records");
    }
    let steps = records.len() as u64 * arms.len() as u64;
    let progress = if steps >= PROGRESS_FROM {
        let bar = indicatif::ProgressBar::new(steps);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let stats = replay_all(&records, &arms, args.model.as_deref(), &progress)?;
    progress.finish_and_clear();

    for s in &stats {
        for msg in &s.error_messages {
            eprintln!("warning: arm `{}`: {msg}", s.arm);
        }
    }
    let unknown: std::collections::BTreeSet<&String> =
        stats.iter().flat_map(|s| &s.unknown_models).collect();
    for model in unknown {
        eprintln!(
            "warning: model `{model}` is not in the model table: its requests are not priced (add a row with --models)"
        );
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, chart::svg(&stats))
            .with_context(|| format!("writing chart {}", path.display()))?;
    }
    let ideal = args
        .ideal
        .then(|| ideal::ideal(&records, args.model.as_deref()));
    let guarded = guard_arms(&arms, &stats, &records, args.model.as_deref());
    if args.json {
        let mut doc = output::json_document(&stats, ideal.as_ref());
        if let (Some(list), Some((_, losses))) = (doc["arms"].as_array_mut(), &guarded) {
            for (value, arm) in list.iter_mut().zip(&stats) {
                if let Some((_, found)) = losses.iter().find(|(a, _)| a.arm == arm.arm) {
                    value["losses"] = serde_json::json!(found);
                }
            }
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        if let Some(ideal) = &ideal {
            print!("{}", output::ideal_lines(ideal));
        }
        print!("{}", output::table(&stats, ideal.as_ref()));
        if let Some((client, losses)) = &guarded {
            print!("{}", guard::lines(losses, client));
        }
    }
    Ok(())
}

/// Each arm that shapes requests against the client alone: the first arm that replays
/// the records as recorded, or such a replay of its own when no arm does. `None` when
/// every arm replays as recorded.
fn guard_arms<'a>(
    arms: &[ArmArg],
    stats: &'a [ArmStats],
    records: &[Record],
    model: Option<&str>,
) -> Option<(String, Vec<guard::ArmLosses<'a>>)> {
    let shaping: Vec<&ArmStats> = arms
        .iter()
        .zip(stats)
        .filter(|(a, _)| !a.policies.is_empty())
        .map(|(_, s)| s)
        .collect();
    if shaping.is_empty() {
        return None;
    }
    let own;
    let (label, client) = match arms.iter().zip(stats).find(|(a, _)| a.policies.is_empty()) {
        Some((_, s)) => (format!("arm `{}`", s.arm), s),
        None => {
            own = replay_arm("client", records, &mut AsRecorded, model, &mut || {});
            ("the requests as recorded".to_string(), &own)
        }
    };
    let losses = shaping
        .into_iter()
        .map(|arm| (arm, guard::losses(arm, client, records)))
        .collect();
    Some((label, losses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_parse() {
        assert_eq!(
            parse_arm("base").unwrap(),
            ArmArg {
                name: "base".into(),
                policies: vec![]
            }
        );
        assert_eq!(
            parse_arm("sys=a.toml, b.toml").unwrap().policies,
            [PathBuf::from("a.toml"), PathBuf::from("b.toml")]
        );
        assert!(parse_arm("=a.toml").is_err());
    }
}
