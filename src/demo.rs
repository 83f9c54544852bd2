//! `restore-hooks demo`: the whole flow on the built-in API-server simulator.

use crate::cli::DemoArgs;

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo is not implemented yet")
}
