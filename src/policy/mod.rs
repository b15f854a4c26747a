//! Policies and `cachet check`. Not built yet.

use crate::cli::CheckArgs;

pub async fn run_check(_args: CheckArgs) -> anyhow::Result<()> {
    anyhow::bail!("policies are not built yet")
}
