//! A pod the webhook marked as admitted in a restore scope (`restore-hooks.dev/restore-run`), as
//! far as the restore model and the late-hook scan need to know it.

use jiff::Timestamp;

use crate::hooks::labels::CompactLabels;

/// A pod the webhook marked as admitted in a restore scope, as the watch of such pods shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkedPod {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its labels: hook objects' selectors, and a StatefulSet pod's ordinal.
    pub labels: CompactLabels,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: it can run no hook that has not started.
    pub deleting: bool,
    /// The hook sources its plan annotation names, as written (unverified: only to skip a late
    /// look that would find nothing), sorted, without repeats.
    pub plan_sources: Box<[Box<str>]>,
    /// The init containers the webhook injected (`restore-hooks.dev/injected`).
    pub injected: Box<[Box<str>]>,
}
