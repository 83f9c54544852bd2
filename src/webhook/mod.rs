//! The HTTPS admission webhook: routing, TLS and certificate reload. It never decides hooks:
//! that is [`review`]'s job, through the hook engine.

mod body;
mod body_deadline;
pub mod exec_rights;
pub mod limits;
pub mod observed;
mod receive;
pub mod review;
pub mod server;
pub mod tls;

pub use limits::{LimitStats, Limits};
pub use limits::{MAX_BODY_BYTES, Timeouts};
pub use server::{Bound, WebhookError, WebhookSources, noop_router};
