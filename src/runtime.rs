//! Process wiring for the server roles: logging, metrics, the admin server, signals, and the
//! webhook and/or controller.

use crate::cli::{ControllerCommand, ServeArgs, WebhookCommand};

pub async fn run_serve(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("serve is not implemented yet")
}

pub async fn run_webhook(_args: WebhookCommand) -> anyhow::Result<()> {
    anyhow::bail!("webhook is not implemented yet")
}

pub async fn run_controller(_args: ControllerCommand) -> anyhow::Result<()> {
    anyhow::bail!("controller is not implemented yet")
}
