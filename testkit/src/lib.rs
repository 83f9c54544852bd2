//! What the workspace's tests (and the demo's testbed) share, so that every wait and every
//! certificate is made one way:
//!
//! - [`eventually!`] (async) and [`wait_until`] (blocking) poll a probe until it is ready, and
//!   panic naming what was awaited, the limit and the last thing seen ([`try_wait_until`]
//!   returns that as a [`TimedOut`] instead). Limits are guards against hangs, never speed
//!   requirements: a loaded CI machine is slow, only a hang must fail.
//! - [`ThrowawayCa`] issues serving certificates from an in-memory CA; [`Leaf::write`],
//!   [`ThrowawayCa::write_cert`] and [`write_pem`] put them into a directory.
//! - [`procfs`] reads a process's memory and CPU time, and the machine's, for the benches and the
//!   memory test.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod pki;
pub mod procfs;
mod wait;

pub use pki::{Leaf, ThrowawayCa, write_pem};
pub use wait::{GUARD, POLL, POLL_BLOCKING, Probe, TimedOut, try_wait_until, wait_until};

#[doc(hidden)]
pub use wait::timed_out as __timed_out;

#[doc(hidden)]
pub use tokio as __tokio;
