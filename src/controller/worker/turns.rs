//! What a pod's hooks wait for beyond the pod itself: the restore model's answers for
//! `runOn: OnePod` (docs/behaviour.md §6.15) and `after` (§6.16), and whether the pod is still in
//! a restore scope (§6.2).

use std::collections::BTreeMap;

use restore_hooks_core::exec_step::{Presence, align, hook_is_up};
use restore_hooks_core::hooks::plan::{ExecPlan, ExecStatus, HookPhase, RunOn};
use restore_hooks_core::hooks::scope::restore_scope;
use restore_hooks_core::restore::Standing;
use restore_hooks_core::restore::after::AfterTurn;
use restore_hooks_core::restore::one_pod::{OnePodTurn, one_pod_key, turn};

use crate::controller::slim_pod::PodState;

use super::PodWorker;

impl PodWorker {
    /// A pod whose namespace is excluded, or that is in no restore scope any more: nothing more
    /// runs in it, whatever it carries (docs/behaviour.md §6.2).
    pub(super) fn out_of_scope(&self, pod: &PodState) -> Option<String> {
        let engine = &self.shared.engine;
        if engine.excluded_namespaces.contains(&pod.namespace) {
            return Some(format!(
                "namespace {} is excluded from restore hooks (--exclude-namespace); not executed",
                pod.namespace
            ));
        }
        let index = self.shared.index.read();
        // A namespace the cache does not show yet (created a moment ago, or its watch is behind)
        // cannot show a restore label that was taken away: admission checked the scope, and
        // the pod keeps it until the namespace is seen without it.
        let namespace_labels = index.namespace_labels(&pod.namespace)?;
        let in_scope = restore_scope(
            &pod.namespace,
            Some(&pod.labels),
            Some(namespace_labels),
            engine,
        )
        .is_some();
        (!in_scope).then(|| {
            format!(
                "the pod is not in a restore scope any more (no {} label, and namespace {} has no {} label); not executed",
                engine.restore_label, pod.namespace, engine.restore_namespace_label
            )
        })
    }

    /// Posts the pod's standing for each of its `runOn: OnePod` hooks and returns each one's turn
    /// (docs/behaviour.md §6.15). The pod can run a hook while it is present, not terminal and in
    /// a restore scope; whether it is a candidate at all (vouched for, the hook pending) is the
    /// restore model's to say.
    pub(super) fn one_pod_turns(
        &self,
        pod: &PodState,
        plan: &ExecPlan,
        status: Option<&ExecStatus>,
        out_of_scope: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        if plan.hooks.iter().all(|h| h.run_on != RunOn::OnePod) {
            return BTreeMap::new();
        }
        let status = align(plan, status);
        let able = pod.view.presence == Presence::Present
            && !matches!(pod.view.phase.as_deref(), Some("Succeeded" | "Failed"))
            && !out_of_scope;
        for (i, hook) in plan.hooks.iter().enumerate() {
            if hook.run_on == RunOn::OnePod && status.hooks[i].phase == HookPhase::Pending {
                let key = one_pod_key(&plan.restore, &self.namespace, hook);
                let up = hook_is_up(plan, &pod.view, i);
                self.shared
                    .restores
                    .post_standing(&self.uid, &key, Standing { up, able });
            }
        }
        self.one_pod_turns_now(plan, &status, able)
    }

    /// The turn of each pending `runOn: OnePod` hook of the pod, as the record and the restore
    /// model say now. A pod decides no turn before the model listed the restore's pods and knows
    /// this pod itself: the watch shows pods in the order they were created, so every pod
    /// created before it is known then (one created later cannot take the hook from it).
    pub(super) fn one_pod_turns_now(
        &self,
        plan: &ExecPlan,
        status: &ExecStatus,
        able: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        let mut turns = BTreeMap::new();
        for (i, hook) in plan.hooks.iter().enumerate() {
            if hook.run_on != RunOn::OnePod || status.hooks[i].phase != HookPhase::Pending {
                continue;
            }
            let key = one_pod_key(&plan.restore, &self.namespace, hook);
            let holder = self.shared.ledger.one_pod_holder(&key);
            let holder = holder.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
            let (candidates, settled) = self.shared.restores.read(|index| {
                (
                    index.one_pod_candidates(&key),
                    index.is_listed() && index.knows(&self.uid),
                )
            });
            let mut turn = turn(&self.uid, holder, &candidates, able);
            if turn == OnePodTurn::Go && holder.is_none() && !settled {
                turn = OnePodTurn::Wait;
            }
            turns.insert(i, turn);
        }
        turns
    }

    /// The turn of each pending hook with `after` (docs/behaviour.md §6.16), from the runs of the
    /// hooks it waits for across the restore's pods.
    pub(super) fn after_turns(
        &self,
        plan: &ExecPlan,
        status: Option<&ExecStatus>,
    ) -> BTreeMap<usize, AfterTurn> {
        self.shared
            .restores
            .read(|index| index.after_turns(&self.namespace, plan, status))
    }

    /// The turns of the pod's `runOn: OnePod` hooks without posting its standing: while results
    /// are recorded (`able`: nothing starts then, but a hook another pod started ends here), or
    /// for a pod that is gone (not `able`: a hook another candidate can take is passed on).
    pub(super) fn unposted_turns(
        &self,
        plan: &ExecPlan,
        status: &ExecStatus,
        able: bool,
    ) -> BTreeMap<usize, OnePodTurn> {
        self.one_pod_turns_now(plan, status, able)
            .into_iter()
            .filter(|(_, t)| *t != OnePodTurn::Go)
            .collect()
    }
}
