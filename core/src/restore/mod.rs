//! The restore as its own piece of core: every question that is about a *restore* rather than one
//! pod, answered in one place from the pods and hook objects the controller sees, as values.
//!
//! - [`RestoreIndex`]: fed with each marked pod (its verified plan and status) and with what the
//!   pods' workers learn (a container up, a pod that can no longer run a hook), it answers which
//!   pods belong to a restore, the turn of each `after` waiter ([`after`]), the pod that runs each
//!   `runOn: OnePod` hook ([`one_pod`]), the counts behind every RestoreHook, ClusterRestoreHook
//!   and RestoreRun status ([`tally`], [`counts`]) and the pods a late hook object may extend.
//! - [`report`]: what `restore-hooks describe` shows about one restore, from its pods, its
//!   RestoreRun and Events as listed.
//! - Scope lives in the keys: an awaited hook is one object's hooks in the pods of one namespace,
//!   a `OnePod` hook one object's hook in one restore (and one namespace for a RestoreHook), and
//!   only pods someone vouches for beyond their own labels count for another pod (§6.20).
//!
//! Nothing here does I/O, takes a lock or reads a clock; the controller's shell
//! (`src/controller/restores.rs`) owns one index per leadership, feeds it from the watch of the
//! marked pods, and wakes the workers whose answers changed.

pub mod after;
pub mod counts;
mod index;
mod marked;
pub mod one_pod;
pub mod report;
pub mod tally;

pub use index::{Changes, RestoreIndex, Standing, Verified};
pub use marked::MarkedPod;
