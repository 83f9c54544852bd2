//! The `RestoreRun` of each restore (docs/behaviour.md §8.3): its phase, counts and its
//! `Completed` and `Failed` conditions, and its retention once it completed.

use std::collections::HashMap;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use restore_hooks_core::hooks::types::{HookCounts, RestoreRecord, RestoreRun, RestoreRunStatus};
use restore_hooks_core::restore::counts::Totals;
use restore_hooks_core::restore::tally::{Target, restore_run_name, run_conditions, run_phase};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{Writer, condition};

impl Writer {
    pub(super) async fn write_run(&mut self, target: &Target, restore: &str) -> anyhow::Result<()> {
        let name = restore_run_name(restore);
        let api: Api<RestoreRun> = Api::all(self.client.clone());
        let nothing = self.restores.read(|index| {
            index
                .totals(target, HookCounts::default())
                .is_none_or(|t| t.planned == 0 && t.folded.is_empty())
        });
        if nothing {
            // Only pods without hooks of this restore left: nothing to report.
            return Ok(());
        }
        let existing = match api.get_opt(&name).await? {
            Some(run) => run,
            None => crate::controller::ledger::create_restore_run(&api, &name, restore).await?,
        };
        let status = existing.status.clone().unwrap_or_default();
        let snapshot = self.snapshot(target, status.retired);
        let Totals {
            counts,
            retired,
            planned,
            folded,
        } = snapshot.totals;
        let retired_pods = status.retired_pods.unwrap_or_default() + folded.len() as i64;
        let phase = run_phase(&counts);
        let failed_pods = snapshot.failed_pods;
        let completed_at = if phase == "InProgress" {
            None
        } else {
            Some(
                status
                    .completed_at
                    .clone()
                    .unwrap_or_else(|| restore_hooks_core::exec_step::timestamp(Timestamp::now())),
            )
        };
        let refused = if counts.refused > 0 {
            format!(" ({} of them refused)", counts.refused)
        } else {
            String::new()
        };
        let message = format!(
            "{planned} pod(s): {} succeeded, {} failed{refused}, {} skipped, {} pending, {} init hooks missed",
            counts.succeeded, counts.failed, counts.skipped, counts.pending, counts.missed_init
        );
        // `Completed` on every end, `Failed` telling them apart (docs/behaviour.md §8.3).
        let conditions: Vec<_> = run_conditions(phase)
            .into_iter()
            .map(|(type_, value)| {
                condition(type_, value, phase, &message, None, &status.conditions)
            })
            .collect();
        let body = json!({
            "metadata": {"resourceVersion": existing.metadata.resource_version},
            "status": {
                "phase": phase,
                "podsPlanned": planned,
                "hooks": counts,
                "failedPods": failed_pods,
                "onePod": snapshot.one_pod,
                "retired": retired,
                "retiredPods": (retired_pods > 0).then_some(retired_pods),
                "completedAt": completed_at,
                "conditions": conditions,
            }
        });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        self.folded(target, &folded);
        if status.phase != phase {
            // Not `message`: that is the log line's own text in JSON logs (one key per line).
            info!(restorerun = %name, restore, phase, counts = %message, "restore phase");
        }
        Ok(())
    }

    /// Deletes RestoreRuns completed longer ago than the retention period, once none of the pods
    /// their record holds exists any more: the record is what keeps those pods' hooks from
    /// running again (docs/behaviour.md §8.3, §9.5).
    pub(super) async fn sweep(&mut self) {
        if !self.restores.is_listed() {
            // Which pods exist is not known before the first list.
            return;
        }
        let api: Api<RestoreRun> = Api::all(self.client.clone());
        let Ok(runs) = api.list(&ListParams::default()).await else {
            return;
        };
        let retention = jiff::SignedDuration::try_from(self.config.restore_run_retention)
            .unwrap_or(jiff::SignedDuration::MAX);
        let now = Timestamp::now();
        let expired = |status: &RestoreRunStatus| {
            let done = status
                .completed_at
                .as_deref()
                .and_then(|t| t.parse::<Timestamp>().ok());
            done.is_some_and(|done| {
                status.phase != "InProgress" && now.duration_since(done) >= retention
            })
        };
        let expired: Vec<RestoreRun> = runs
            .into_iter()
            .filter(|run| run.status.as_ref().is_some_and(expired))
            .collect();
        if expired.is_empty() {
            // The record is read only when there is something to delete: it is every pod's entry.
            return;
        }
        let records: Api<RestoreRecord> = Api::all(self.client.clone());
        let Ok(parts) = records.list(&ListParams::default()).await else {
            return;
        };
        let mut record_of: HashMap<&str, Vec<&RestoreRecord>> = HashMap::new();
        for part in &parts {
            record_of
                .entry(part.spec.restore_run.as_str())
                .or_default()
                .push(part);
        }
        for run in expired {
            let Some(status) = &run.status else { continue };
            let name = run.name_any();
            let parts = record_of.get(name.as_str()).map_or(&[][..], Vec::as_slice);
            let live = parts
                .iter()
                .flat_map(|p| p.status.iter().flat_map(|s| s.executions.keys()))
                .chain(status.executions.keys())
                .find(|uid| self.restores.read(|index| index.knows(uid)));
            if let Some(live) = live {
                debug!(restorerun = %name, pod_uid = %live, "kept past its retention period: a pod it ran hooks on still exists");
                continue;
            }
            // The record first, and the RestoreRun only once all of it is gone: a RestoreRun
            // left behind is deleted by the next sweep, a part left behind would be kept by
            // nothing (the garbage collector deletes it too, through its owner reference, where
            // one runs).
            let mut left = 0;
            for part in parts {
                if let Err(e) = records
                    .delete(&part.name_any(), &DeleteParams::default())
                    .await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
                    warn!(restorerecord = %part.name_any(), error = %e, "could not delete part of an expired RestoreRun's record; trying again at the next sweep");
                    left += 1;
                }
            }
            if left > 0 {
                continue;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    info!(restorerun = %name, completed_at = ?status.completed_at, "RestoreRun past its retention period; deleted");
                    self.restores.forget_target(&Target::RestoreRun {
                        restore: run.spec.restore.clone(),
                    });
                }
                Err(e) => {
                    warn!(restorerun = %name, error = %e, "could not delete an expired RestoreRun")
                }
            }
        }
    }
}
