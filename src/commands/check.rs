//! `cachet check`: validate the configuration and every policy, report each error.

use std::path::PathBuf;

use crate::cli::{CheckArgs, PolicyArgs};
use crate::config::Config;
use crate::policy::{load_policies, render_errors, PolicyError, PolicySet};

/// The policies named by the configuration (`[policies] files`, `dirs`) and the command
/// line (`--policy`, `--policies`), loaded and validated. `cachet serve` uses this too.
pub fn load_for(args: &PolicyArgs, config: &Config) -> Result<PolicySet, Vec<PolicyError>> {
    let mut files: Vec<PathBuf> = config.policies.files.clone();
    files.extend(args.policy.iter().cloned());
    let mut dirs: Vec<PathBuf> = config.policies.dirs.clone();
    dirs.extend(args.policies.iter().cloned());
    load_policies(&files, &dirs)
}

pub async fn run_check(args: CheckArgs) -> anyhow::Result<()> {
    let config = match Config::load(args.policy.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            anyhow::bail!("check failed: the configuration is invalid");
        }
    };
    match load_for(&args.policy, &config) {
        Ok(set) => {
            println!("{}", summary(&set));
            Ok(())
        }
        Err(errors) => {
            eprintln!("{}", render_errors(&errors));
            let n = errors.len();
            anyhow::bail!(
                "check failed: {n} error{} in policies",
                if n == 1 { "" } else { "s" }
            )
        }
    }
}

fn summary(set: &PolicySet) -> String {
    let mut out = String::from("configuration ok");
    if set.is_empty() {
        out.push_str("; no policies active");
        return out;
    }
    let n = set.len();
    out.push_str(&format!(
        "; {n} polic{} active, in run order:",
        if n == 1 { "y" } else { "ies" }
    ));
    for (i, p) in set.iter().enumerate() {
        out.push_str(&format!(
            "\n  {}. {} (order {}, {})",
            i + 1,
            p.name,
            p.order,
            p.source_file.display()
        ));
    }
    out
}
