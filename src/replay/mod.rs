//! `cachet replay`. Not built yet.

use crate::cli::ReplayArgs;

pub async fn run_replay(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("replay is not built yet")
}
