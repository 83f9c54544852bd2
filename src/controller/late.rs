//! Hook objects that arrive after their pods (docs/behaviour.md §7.2).
//!
//! Velero restores pods before custom resources, so a RestoreHook restored with its application
//! is created after the pods it selects; `kubectl apply -f dir/` can do the same to a RestoreHook
//! and its pods, and a webhook's watch cache can simply lag. When a RestoreHook or
//! ClusterRestoreHook appears (or gets a new generation), the leader looks at the pods the webhook
//! marked as admitted in a restore scope, and appends the object's exec hooks to the plans of
//! those it selects that are still young enough (`--late-hook-window`), signed like the
//! webhook's. Its init hooks cannot apply to a running pod: they are recorded in the plan as
//! missed, and reported on the object. A pod marked only after such a scan (the watches are
//! separate streams, and a webhook replica may not have compiled an object the controller already
//! has) is looked at when it first appears, against the objects that select it but are not in
//! its plan yet. A pod's namespace that the watch cache does not show yet (created a moment ago,
//! or the namespace watch is behind) is read from the API server, as admission does: a
//! namespaceSelector must not take it for unlabelled.
//!
//! The rules of the merge are `restore_hooks_core::late_hooks`; this module finds the pods, reads
//! and verifies their plans, and signs and writes the merged ones.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use restore_hooks_core::config::EngineConfig;
use restore_hooks_core::exec_step::timestamp;
use restore_hooks_core::hooks::compiled::{CompiledObject, SourceKind};
use restore_hooks_core::hooks::plan::{EXEC_LABEL, EXEC_PENDING, ExecPlan, PLAN_ANNOTATION};
use restore_hooks_core::hooks::pod::AdmittedPod;
use restore_hooks_core::hooks::resolve::{PodContext, resolve_late_hooks};
use restore_hooks_core::hooks::scope::restore_scope;
use restore_hooks_core::hooks::signing::{PLAN_SIGNATURE_ANNOTATION, PodBinding};
use restore_hooks_core::hooks::types::Labels;
use restore_hooks_core::late_hooks::{LateMerge, LatePod, contributed, may_extend, merge};
use restore_hooks_core::trust::{PodFacts, verify};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::events::{EventSink, EventType, INIT_HOOKS_MISSED, LATE_HOOKS_ADDED, Regarding};
use super::ledger::Ledger;
use super::object_status::{LateOutcome, Tally};
use super::restores::Restores;
use crate::backoff::{ApiBackoff, is_transient};
use crate::catalog::{HookIndex, SharedIndex};
use crate::metrics::Metrics;
use crate::plan_key::KeyRing;

/// How long one pod's late look waits out an API server that is busy or unavailable.
const BUSY_FOR: Duration = Duration::from_secs(30);

/// The leader's late-hook task: everything it reads and writes, then [`LateHooks::run`].
pub struct LateHooks {
    /// Reads and patches pods (the controller's identity).
    pub client: kube::Client,
    /// The hook objects whose arrivals and new generations start a scan.
    pub index: Arc<SharedIndex>,
    /// The restore model: the pods the webhook admitted in a restore scope are the candidates.
    pub restores: Restores,
    /// Verifies the plans read and signs the merged ones; no key, no merge.
    pub keys: KeyRing,
    /// The scope and selector rules, the same as the webhook's.
    pub engine: EngineConfig,
    /// `--late-hook-window`: only pods younger than this get late hooks; zero turns the task
    /// off.
    pub window: Duration,
    /// `LateHooksAdded` and `InitHooksMissed` Events on the hook objects.
    pub events: EventSink,
    /// Counts the exec hooks added.
    pub metrics: Metrics,
    /// Where each scan's outcome goes: the objects' `LateHooks` condition.
    pub tally: Tally,
    /// Which pod holds which plan: only a plan held for this very pod is extended.
    pub ledger: Ledger,
}

/// What happened to one pod.
enum PodResult {
    Added { exec: usize, missed_init: usize },
    Nothing,
    TooOld,
}

/// Notes what adding `object`'s late hooks did to pod `who` (`namespace/name`) in `outcome`;
/// false when there is nothing to report: nothing added, or an error (logged: the pod is not
/// looked at again until the hook object changes).
fn note(
    outcome: &mut LateOutcome,
    who: String,
    object: &CompiledObject,
    result: anyhow::Result<PodResult>,
) -> bool {
    match result {
        Ok(PodResult::Added { exec, missed_init }) => {
            if missed_init > 0 {
                outcome.missed_init.push(who.clone());
            }
            if exec > 0 {
                outcome.added.push(who);
            }
        }
        Ok(PodResult::TooOld) => outcome.outside_window.push(who),
        Ok(PodResult::Nothing) => return false,
        Err(e) => {
            warn!(pod = %who, source = %object.source(), error = %format!("{e:#}"), "could not add late hooks; this pod is not looked at again until the hook object changes");
            return false;
        }
    }
    true
}

impl LateHooks {
    /// Runs until `stop` is cancelled (the end of leadership).
    pub async fn run(self, stop: CancellationToken) {
        if self.window.is_zero() {
            return;
        }
        let mut compiled = self.index.subscribe();
        let mut arrivals = self.restores.arrivals();
        // Objects compiled before this leader started are looked at once: a restore may have
        // happened while no replica led.
        let known = self.hook_objects();
        // The scan compares objects with the marked pods: wait for their first list (the tally
        // starts with this leader), or the objects compiled before now would be compared with
        // an empty set and never added to the pods admitted before them.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = async { tokio::join!(self.restores.listed(), self.ledger.loaded()) } => {}
        }
        for object in known {
            self.scan(&object, &stop).await;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                event = compiled.recv() => match event {
                    Ok(c) if c.changed && c.object.kind != SourceKind::VeleroRestore => self.scan(&c.object, &stop).await,
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        warn!(missed = n, "late-hook scan fell behind; rescanning every hook object");
                        self.scan_all(&stop).await;
                    }
                    Err(_) => return,
                },
                arrival = arrivals.recv() => match arrival {
                    Ok(uid) => self.arrived(&uid, &stop).await,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        warn!(missed = n, "late-hook look at new pods fell behind; rescanning every hook object");
                        self.scan_all(&stop).await;
                    }
                    Err(_) => return,
                },
            }
        }
    }

    /// The labels of those of `namespaces` that the index does not show yet, read from the API
    /// server (a list by name: the controller may list and watch namespaces, and needs no more);
    /// empty, without a request, when it shows them all. A namespace that cannot be read is left
    /// out: its pods are not looked at now (a hook object that changes, or a pod marked later,
    /// looks again).
    async fn read_unknown_namespaces(
        &self,
        namespaces: BTreeSet<String>,
    ) -> BTreeMap<String, Labels> {
        let unknown: Vec<String> = {
            let index = self.index.read();
            namespaces
                .into_iter()
                .filter(|n| index.namespace_labels(n).is_none())
                .collect()
        };
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut found = BTreeMap::new();
        for name in unknown {
            let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
            let (result, labels) = match api.list_metadata(&by_name).await {
                Ok(list) => match list.items.into_iter().next() {
                    Some(ns) => ("found", Some(ns.metadata.labels.unwrap_or_default())),
                    None => ("not_found", None),
                },
                Err(e) => {
                    warn!(namespace = %name, error = %e, "cannot read a namespace the cache does not show yet; its pods get no late hooks now");
                    ("error", None)
                }
            };
            self.metrics
                .namespace_lookups
                .with_label_values(&[result])
                .inc();
            if let Some(labels) = labels {
                found.insert(name, labels);
            }
        }
        found
    }

    /// A pod first marked after the leader's first look: the hook objects it did not get at
    /// admission although they select it (the webhook had not compiled them yet, or their scan
    /// ran before this pod was marked) are applied to it as late hook objects.
    async fn arrived(&self, uid: &str, stop: &CancellationToken) {
        let Some(pod) = self.restores.read(|index| index.pod(uid).cloned()) else {
            return;
        };
        let read = self
            .read_unknown_namespaces(BTreeSet::from([pod.namespace.clone()]))
            .await;
        let objects: Vec<Arc<CompiledObject>> = {
            let index = self.index.read();
            let Some(labels) = labels_of(&index, &read, &pod.namespace) else {
                return;
            };
            index
                .cluster_restore_hooks()
                .chain(index.restore_hooks(&pod.namespace))
                .filter(|o| {
                    o.first_problem().is_none() && may_extend(o, &pod, labels, &index, &self.engine)
                })
                .cloned()
                .collect()
        };
        let who = format!("{}/{}", pod.namespace, pod.name);
        for object in objects {
            let mut outcome = LateOutcome::default();
            let result = self
                .extend_retrying(&object, uid, &pod.namespace, &pod.name, &read, stop)
                .await;
            if !note(&mut outcome, who.clone(), &object, result) {
                continue;
            }
            self.report(&object, &outcome).await;
            self.tally.late_outcome(&object, outcome);
        }
    }

    /// Every hook object the index holds, ClusterRestoreHooks first.
    fn hook_objects(&self) -> Vec<Arc<CompiledObject>> {
        let index = self.index.read();
        index
            .cluster_restore_hooks()
            .chain(index.all_restore_hooks())
            .cloned()
            .collect()
    }

    /// Looks at every hook object again (after missed events).
    async fn scan_all(&self, stop: &CancellationToken) {
        for object in self.hook_objects() {
            self.scan(&object, stop).await;
        }
    }

    /// The pods `object` selects that were admitted before it, and what it adds to each.
    async fn scan(&self, object: &CompiledObject, stop: &CancellationToken) {
        if object.first_problem().is_some() {
            return;
        }
        // Usually none: only namespaces the index does not show are collected (a new leader
        // scans every object against every marked pod). A RestoreHook selects pods of its own
        // namespace only (docs/behaviour.md §7.2).
        let unknown: BTreeSet<String> = {
            let index = self.index.read();
            let own = match object.kind {
                SourceKind::RestoreHook => object.namespace.as_deref(),
                _ => None,
            };
            self.restores.read(|restores| {
                restores
                    .namespaces()
                    .filter(|ns| own.is_none_or(|own| own == *ns))
                    .filter(|ns| index.namespace_labels(ns).is_none())
                    .map(str::to_string)
                    .collect()
            })
        };
        let read = self.read_unknown_namespaces(unknown).await;
        let candidates: Vec<(String, String, String)> = {
            let index = self.index.read();
            self.restores.read(|restores| {
                restores.late_candidates(
                    object,
                    |ns| labels_of(&index, &read, ns),
                    &index,
                    &self.engine,
                )
            })
        };
        if candidates.is_empty() {
            return;
        }
        let mut outcome = LateOutcome::default();
        for (uid, namespace, name) in candidates {
            let result = self
                .extend_retrying(object, &uid, &namespace, &name, &read, stop)
                .await;
            note(&mut outcome, format!("{namespace}/{name}"), object, result);
        }
        if outcome != LateOutcome::default() {
            self.report(object, &outcome).await;
            self.tally.late_outcome(object, outcome);
        }
    }

    async fn report(&self, object: &CompiledObject, outcome: &LateOutcome) {
        let about = Regarding::hook_object(object.kind, object.namespace.as_deref(), &object.name);
        let list = |pods: &[String]| {
            let mut shown: Vec<&str> = pods.iter().take(20).map(String::as_str).collect();
            if pods.len() > 20 {
                shown.push("...");
            }
            shown.join(", ")
        };
        if !outcome.added.is_empty() {
            let message = format!(
                "its exec hooks were added to {} pod(s) admitted before it: {}",
                outcome.added.len(),
                list(&outcome.added)
            );
            info!(source = %object.source(), pods = outcome.added.len(), "late exec hooks added");
            self.events
                .publish(&about, EventType::Normal, LATE_HOOKS_ADDED, &message);
        }
        if !outcome.missed_init.is_empty() {
            let message = format!(
                "{} pod(s) were created before it, so its init hooks could not run in them: {}. \
                 Restore hook objects before pods (see Velero's --restore-resource-priorities in docs/hooks.md), \
                 or use a ClusterRestoreHook created before the restore",
                outcome.missed_init.len(),
                list(&outcome.missed_init)
            );
            self.events
                .publish(&about, EventType::Warning, INIT_HOOKS_MISSED, &message);
        }
        if !outcome.outside_window.is_empty() {
            let message = format!(
                "{} pod(s) it selects were admitted more than {} ago (--late-hook-window): its hooks were not added to them: {}",
                outcome.outside_window.len(),
                humantime(self.window),
                list(&outcome.outside_window)
            );
            self.events
                .publish(&about, EventType::Warning, LATE_HOOKS_ADDED, &message);
        }
    }

    /// [`Self::extend`], tried again (jittered backoff) while the API server is busy or
    /// unavailable (429, 5xx, a lost connection), for up to [`BUSY_FOR`] and not after `stop`:
    /// a hook object is looked at again only when it changes, so a moment's error must not cost
    /// a pod its hooks.
    async fn extend_retrying(
        &self,
        object: &CompiledObject,
        uid: &str,
        namespace: &str,
        name: &str,
        read: &BTreeMap<String, Labels>,
        stop: &CancellationToken,
    ) -> anyhow::Result<PodResult> {
        let mut backoff = ApiBackoff::default();
        let since = tokio::time::Instant::now();
        loop {
            let error = match self.extend(object, uid, namespace, name, read).await {
                Err(e) => e,
                done => return done,
            };
            let Some(api) = error
                .downcast_ref::<kube::Error>()
                .filter(|e| is_transient(e))
            else {
                return Err(error);
            };
            if since.elapsed() >= BUSY_FOR {
                return Err(error);
            }
            let wait = backoff.after(Some(api));
            debug!(pod = %format!("{namespace}/{name}"), source = %object.source(), error = %api, retry_in = ?wait, "adding late hooks failed for a moment; trying again");
            tokio::select! {
                _ = stop.cancelled() => return Err(error),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn extend(
        &self,
        object: &CompiledObject,
        uid: &str,
        namespace: &str,
        name: &str,
        read: &BTreeMap<String, Labels>,
    ) -> anyhow::Result<PodResult> {
        let Some(keys) = self.keys.current() else {
            anyhow::bail!("the plan key is not loaded");
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        for _attempt in 0..5 {
            let Some(pod) = api.get_opt(name).await? else {
                return Ok(PodResult::Nothing);
            };
            if pod.uid().as_deref() != Some(uid) {
                return Ok(PodResult::Nothing);
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed"))
                || pod.metadata.deletion_timestamp.is_some()
            {
                return Ok(PodResult::Nothing);
            }
            let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let annotations = pod.metadata.annotations.clone().unwrap_or_default();
            let get = |k: &str| annotations.get(k).map(String::as_str);
            // An existing plan is only extended when it is genuine.
            let existing = match get(PLAN_ANNOTATION) {
                None => None,
                Some(_) => {
                    let facts = PodFacts {
                        namespace,
                        name,
                        generate_name: pod.metadata.generate_name.as_deref(),
                        uid,
                        created,
                        plan: get(PLAN_ANNOTATION),
                        plan_signature: get(PLAN_SIGNATURE_ANNOTATION),
                        status: None,
                        status_signature: None,
                    };
                    // Issued by this installation, for this very pod: signed, bound to its
                    // creation, and held for its uid (a copy carried by a second pod is not).
                    let held = verify(&facts, Some(&keys)).and_then(|t| {
                        self.ledger
                            .claim(&t.plan.restore, namespace, uid, &t.plan.id)?;
                        Ok(t.plan)
                    });
                    match held {
                        Ok(plan) => Some(plan),
                        Err(e) => {
                            debug!(pod = %format!("{namespace}/{name}"), reason = %e, "not extending a plan that is not this pod's own");
                            return Ok(PodResult::Nothing);
                        }
                    }
                }
            };
            // An object that contributed to this plan before (at admission, or late) is done
            // with this pod (§7.2): nothing to resolve.
            if existing
                .as_ref()
                .is_some_and(|p| contributed(p, &object.source()))
            {
                return Ok(PodResult::Nothing);
            }
            let value = serde_json::to_value(&pod)?;
            let text = value.to_string();
            let view = AdmittedPod::from_json_str(&text)?;
            // The index is read-locked only for this block: never across an await.
            let resolved = {
                let index = self.index.read();
                let namespace_labels = labels_of(&index, read, namespace);
                restore_scope(namespace, view.labels(), namespace_labels, &self.engine).map(
                    |scope| {
                        let velero =
                            index.velero_restore(&self.engine.velero_namespace, &scope.restore);
                        let restore = existing.as_ref().map_or_else(
                            || velero.map_or(scope.restore.clone(), |r| r.name.clone()),
                            |p| p.restore.clone(),
                        );
                        let ctx = PodContext {
                            pod: &view,
                            namespace,
                            namespace_labels,
                        };
                        let late = resolve_late_hooks(
                            &ctx,
                            &scope,
                            &restore,
                            velero,
                            object,
                            &index,
                            &self.engine,
                        );
                        (restore, late)
                    },
                )
            };
            let Some((restore, late)) = resolved else {
                return Ok(PodResult::Nothing);
            };
            let plan = match existing {
                Some(plan) => plan,
                // A plan the controller issues is bound to this pod's creation, and held for its
                // uid before it is written.
                None => ExecPlan {
                    // The id an earlier attempt recorded for this pod, if its write failed.
                    id: match self.ledger.entry(uid) {
                        Some(recorded) => recorded.plan,
                        None => crate::plan_key::new_plan_id()?,
                    },
                    restore: restore.clone(),
                    issued_at: created.map(timestamp),
                    ..ExecPlan::default()
                },
            };
            let init_containers: Vec<&str> = pod
                .spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten())
                .map(|c| c.name.as_str())
                .collect();
            let facts = LatePod {
                created,
                init_containers: &init_containers,
            };
            let window =
                jiff::SignedDuration::try_from(self.window).unwrap_or(jiff::SignedDuration::MAX);
            let (plan, text, exec, missed_init) =
                match merge(plan, object, late, facts, Timestamp::now(), window)? {
                    LateMerge::Unchanged => return Ok(PodResult::Nothing),
                    LateMerge::TooOld => return Ok(PodResult::TooOld),
                    LateMerge::Extended {
                        plan,
                        annotation,
                        exec,
                        missed_init,
                    } => (plan, annotation, exec, missed_init),
                };
            self.ledger.claim(&plan.restore, namespace, uid, &plan.id)?;
            let binding = PodBinding {
                namespace,
                name,
                generate_name: pod.metadata.generate_name.as_deref().unwrap_or_default(),
            };
            let signature = keys.sign_plan(binding, &text);
            let mut body = json!({"metadata": {
                "resourceVersion": pod.metadata.resource_version,
                "annotations": {PLAN_ANNOTATION: text, PLAN_SIGNATURE_ANNOTATION: signature},
            }});
            if exec > 0 {
                body["metadata"]["labels"] = json!({ EXEC_LABEL: EXEC_PENDING });
            }
            let written = api
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await;
            match written {
                Ok(_) => {
                    if exec > 0 {
                        self.metrics.late_hooks.inc_by(exec as u64);
                    }
                    info!(pod = %format!("{namespace}/{name}"), source = %object.source(), exec, missed_init, "late hooks added to the plan");
                    return Ok(PodResult::Added { exec, missed_init });
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(PodResult::Nothing),
                Err(e) => return Err(e.into()),
            }
        }
        anyhow::bail!("the pod kept changing while the plan was extended")
    }
}

/// A namespace's labels: the index's, or what was read from the API server for this look.
fn labels_of<'a>(
    index: &'a HookIndex,
    read: &'a BTreeMap<String, Labels>,
    namespace: &str,
) -> Option<&'a Labels> {
    index
        .namespace_labels(namespace)
        .or_else(|| read.get(namespace))
}

fn humantime(d: Duration) -> String {
    crate::hooks::duration::format_go_duration(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
