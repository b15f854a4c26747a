//! The provider emulator (`cachet emulate`). Not built yet.

use crate::cli::EmulateArgs;

pub async fn run_emulate(_args: EmulateArgs) -> anyhow::Result<()> {
    anyhow::bail!("the emulator is not built yet")
}
