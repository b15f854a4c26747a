//! `cachet demo`. Not built yet.

use crate::cli::DemoArgs;

pub async fn run_demo(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("the demo is not built yet")
}
