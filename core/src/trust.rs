//! Whether the controller may act on a pod's plan and status at all (docs/behaviour.md §6.2,
//! §9.3, §9.4). Pure: the pod's facts and the keys are arguments.
//!
//! Every check here guards the same thing: a command in a plan runs in a live container with the
//! controller's rights. So the plan must be one this installation's webhook issued for this very
//! pod, the pod must be in a restore scope the installation serves, and the recorded progress must
//! be the controller's own.

use jiff::{SignedDuration, Timestamp};

use crate::hooks::plan::{ExecPlan, ExecStatus};
use crate::hooks::signing::{PlanKeys, PodBinding, SignatureError};

/// How far `issuedAt` may be from the pod's `creationTimestamp`: admission happens within the
/// create request, so this only covers clock skew between API server and webhook replicas.
pub const ISSUED_AT_TOLERANCE: SignedDuration = SignedDuration::from_secs(5 * 60);

const MISSING_ID: &str = "the plan's id";
const MISSING_ISSUED_AT: &str = "the plan's issuedAt";
const MISSING_CREATED: &str = "the pod's creationTimestamp";

/// What the controller knows of a pod, for these checks.
#[derive(Clone, Copy, Debug)]
pub struct PodFacts<'a> {
    /// `metadata.namespace`: must equal the namespace the plan was signed for.
    pub namespace: &'a str,
    /// `metadata.name`: must equal the signed name, unless the plan was signed with an empty
    /// name for a `generateName` pod (docs/behaviour.md §9.3).
    pub name: &'a str,
    /// `metadata.generateName`, when the pod has one.
    pub generate_name: Option<&'a str>,
    /// `metadata.uid`: what the status signature is bound to (§9.4).
    pub uid: &'a str,
    /// `metadata.creationTimestamp`: the plan's `issuedAt` must be within
    /// [`ISSUED_AT_TOLERANCE`] of it.
    pub created: Option<Timestamp>,
    /// The raw `restore-hooks.dev/plan` annotation, as signed.
    pub plan: Option<&'a str>,
    /// The `restore-hooks.dev/plan-signature` annotation.
    pub plan_signature: Option<&'a str>,
    /// The raw `restore-hooks.dev/status` annotation, as signed.
    pub status: Option<&'a str>,
    /// The `restore-hooks.dev/status-signature` annotation.
    pub status_signature: Option<&'a str>,
}

/// Why a pod's hooks are not run. The message is what the pod's Warning Event and status say.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(
        "the pod carries restore-hooks.dev/exec=pending but no restore-hooks.dev/plan annotation"
    )]
    /// The exec label says `pending` but there is no plan.
    NoPlan,
    #[error("the restore-hooks.dev/plan annotation is not a valid plan: {0}")]
    /// The plan verified but is not a valid plan document (the JSON error).
    UnreadablePlan(String),
    #[error(
        "its exec plan was not issued by this installation's webhook for this pod: {0}; nothing is run"
    )]
    /// The plan signature is missing, malformed, from an unknown key or does not match
    /// (§9.3); also when no plan key is configured.
    Unsigned(SignatureError),
    #[error(
        "its exec plan was issued at {issued} for a pod created at {created}: it belongs to \
         another pod (copied, or from an old backup); nothing is run"
    )]
    /// `issuedAt` is more than [`ISSUED_AT_TOLERANCE`] from the pod's creation (or unreadable).
    OtherPod {
        /// The plan's `issuedAt`, as written.
        issued: String,
        /// The pod's `creationTimestamp` (RFC 3339, UTC).
        created: String,
    },
    #[error(
        "{0} is missing, so its exec plan cannot be tied to this one pod (a plan written by hand, or \
         issued by a restore-hooks older than 0.3: recreate the pod to have it planned again); \
         nothing is run"
    )]
    /// The plan lacks `issuedAt` or `id`, or the pod has no `creationTimestamp`: what binds a plan
    /// to one pod cannot be checked, so it is not run (the payload names what is missing).
    Unbound(&'static str),
    #[error(
        "its exec plan {plan} was issued for another pod (uid {holder}), which carried it first: \
         a copied plan; nothing is run"
    )]
    /// The controller's record says another pod carried this plan id first (docs/behaviour.md
    /// §9.3, §9.5).
    ClaimedByOtherPod {
        /// The plan's id.
        plan: String,
        /// The uid of the pod the record holds it for.
        holder: String,
    },
    #[error(
        "its exec plan {plan} replaced plan {recorded}, which the controller recorded for this pod: \
         a plan is never replaced after admission; nothing more is run"
    )]
    /// The pod carries another plan than the one the controller recorded for its uid.
    PlanReplaced {
        /// The id of the plan the pod carries now.
        plan: String,
        /// The id the record holds for the pod.
        recorded: String,
    },
    #[error(
        "the record of RestoreRun {run} already holds {pods} pods of namespace {namespace}, the \
         most one namespace may have in one restore; this pod's hooks are not run (split the \
         restore, or, once its pods are gone, delete RestoreRun {run}, which deletes its record)"
    )]
    /// The restore's record holds as many pods of the pod's namespace as it may (docs/behaviour.md
    /// §10): no new pod of it can be recorded, so none is run.
    RecordFull {
        /// The RestoreRun's name.
        run: String,
        /// The namespace whose share is full.
        namespace: String,
        /// How many pods it records.
        pods: usize,
    },
    #[error(
        "its restore-hooks.dev/status was not written by this installation's controller ({0}): \
         hook progress cannot be trusted, so nothing is run (hooks run at most once)"
    )]
    /// The status signature does not verify for this pod's uid (§9.4).
    ForgedStatus(SignatureError),
    #[error(
        "the restore-hooks.dev/status annotation is unreadable ({0}); no hook is run, to keep hooks at most once"
    )]
    /// The status verified but is not a valid status document (the JSON error).
    UnreadableStatus(String),
}

impl Rejection {
    /// The `reason` label of `restore_hooks_plans_rejected_total` (docs/operations.md).
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Rejection::NoPlan | Rejection::UnreadablePlan(_) => "unreadable_plan",
            Rejection::Unsigned(_) => "unsigned_plan",
            Rejection::OtherPod { .. } => "other_pod",
            Rejection::Unbound(MISSING_ISSUED_AT) => "no_issued_at",
            Rejection::Unbound(_) => "unbound_plan",
            Rejection::ClaimedByOtherPod { .. } => "claimed_by_other_pod",
            Rejection::PlanReplaced { .. } => "plan_replaced",
            Rejection::RecordFull { .. } => "record_full",
            Rejection::ForgedStatus(_) | Rejection::UnreadableStatus(_) => "forged_status",
        }
    }
}

/// The plan and status the controller may act on.
#[derive(Clone, Debug, PartialEq)]
pub struct Trusted {
    /// The verified plan.
    pub plan: ExecPlan,
    /// The verified status; `None` while the pod carries no status annotation yet.
    pub status: Option<ExecStatus>,
}

/// Checks a pod's plan and status. `keys: None` (no key configured) trusts nothing.
pub fn verify(facts: &PodFacts<'_>, keys: Option<&PlanKeys>) -> Result<Trusted, Rejection> {
    let text = facts.plan.ok_or(Rejection::NoPlan)?;
    let keys = keys.ok_or(Rejection::Unsigned(SignatureError::UnknownKey(
        "(no plan key configured)".to_string(),
    )))?;
    verify_signature(facts, keys, text).map_err(Rejection::Unsigned)?;
    let plan =
        ExecPlan::from_annotation(text).map_err(|e| Rejection::UnreadablePlan(e.to_string()))?;
    // What ties a plan to one pod: its id (recorded per pod uid by the controller), and an
    // issuedAt at the pod's creation. Without them that cannot be checked, so nothing runs.
    if plan.id.is_empty() {
        return Err(Rejection::Unbound(MISSING_ID));
    }
    let issued = plan
        .issued_at
        .as_deref()
        .ok_or(Rejection::Unbound(MISSING_ISSUED_AT))?;
    let created = facts.created.ok_or(Rejection::Unbound(MISSING_CREATED))?;
    let issued_at: Option<Timestamp> = issued.parse().ok();
    if issued_at.is_none_or(|i| i.duration_since(created).abs() > ISSUED_AT_TOLERANCE) {
        return Err(Rejection::OtherPod {
            issued: issued.to_string(),
            created: crate::exec_step::timestamp(created),
        });
    }
    let status = match facts.status {
        None => None,
        Some(raw) => {
            keys.verify_status(facts.uid, raw, facts.status_signature)
                .map_err(Rejection::ForgedStatus)?;
            Some(
                ExecStatus::from_annotation(raw)
                    .map_err(|e| Rejection::UnreadableStatus(e.to_string()))?,
            )
        }
    };
    Ok(Trusted { plan, status })
}

/// The webhook signed with the name it saw: none for a `generateName` pod (the API server names it
/// after admission), so such a plan verifies with an empty name and the pod's prefix.
fn verify_signature(
    facts: &PodFacts<'_>,
    keys: &PlanKeys,
    text: &str,
) -> Result<(), SignatureError> {
    let generate_name = facts.generate_name.unwrap_or_default();
    let named = PodBinding {
        namespace: facts.namespace,
        name: facts.name,
        generate_name,
    };
    match keys.verify_plan(named, text, facts.plan_signature) {
        Err(SignatureError::Mismatch)
            if !generate_name.is_empty() && facts.name.starts_with(generate_name) =>
        {
            keys.verify_plan(PodBinding { name: "", ..named }, text, facts.plan_signature)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::plan::ExecPlan;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn created() -> Timestamp {
        "2026-12-03T10:00:00Z".parse().unwrap()
    }

    fn plan_text(issued: &str) -> String {
        ExecPlan {
            id: "AAECAwQFBgcICQoL".into(),
            restore: "r".into(),
            issued_at: Some(issued.into()),
            ..Default::default()
        }
        .to_annotation()
    }

    fn facts<'a>(plan: &'a str, sig: Option<&'a str>) -> PodFacts<'a> {
        PodFacts {
            namespace: "shop",
            name: "web-x7k2p",
            generate_name: Some("web-"),
            uid: "u1",
            created: Some(created()),
            plan: Some(plan),
            plan_signature: sig,
            status: None,
            status_signature: None,
        }
    }

    #[test]
    fn only_plans_issued_for_this_pod_are_trusted() {
        let keys = PlanKeys::new(KEY, None).unwrap();
        let text = plan_text("2026-12-03T10:00:01Z");
        // Signed at admission, before the API server named the pod.
        let at_admission = PodBinding {
            namespace: "shop",
            name: "",
            generate_name: "web-",
        };
        let sig = keys.sign_plan(at_admission, &text);
        assert!(verify(&facts(&text, Some(&sig)), Some(&keys)).is_ok());

        let hand_written = plan_text("2026-12-03T10:00:01Z");
        assert!(matches!(
            verify(&facts(&hand_written, None), Some(&keys)),
            Err(Rejection::Unsigned(SignatureError::Missing(_)))
        ));
        let edited = text.replace("\"r\"", "\"other\"");
        assert_eq!(
            verify(&facts(&edited, Some(&sig)), Some(&keys)),
            Err(Rejection::Unsigned(SignatureError::Mismatch))
        );
        let mut elsewhere = facts(&text, Some(&sig));
        elsewhere.namespace = "kube-system";
        assert!(verify(&elsewhere, Some(&keys)).is_err());
        let other_key = PlanKeys::new(b"ffffffffffffffffffffffffffffffff", None).unwrap();
        assert!(matches!(
            verify(&facts(&text, Some(&sig)), Some(&other_key)),
            Err(Rejection::Unsigned(SignatureError::UnknownKey(_)))
        ));
        assert!(
            verify(&facts(&text, Some(&sig)), None).is_err(),
            "no key: nothing is trusted"
        );

        // A valid plan of an older pod of the same name (copied, or restored from a backup).
        let old = plan_text("2026-12-01T08:00:00Z");
        let old_sig = keys.sign_plan(at_admission, &old);
        assert!(matches!(
            verify(&facts(&old, Some(&old_sig)), Some(&keys)),
            Err(Rejection::OtherPod { .. })
        ));
    }

    #[test]
    fn a_plan_that_cannot_be_tied_to_one_pod_is_refused() {
        let keys = PlanKeys::new(KEY, None).unwrap();
        let binding = PodBinding {
            namespace: "shop",
            name: "",
            generate_name: "web-",
        };
        let signed = |plan: ExecPlan| {
            let text = plan.to_annotation();
            let sig = keys.sign_plan(binding, &text);
            (text, sig)
        };
        let full = ExecPlan::from_annotation(&plan_text("2026-12-03T10:00:01Z")).unwrap();
        let rows: [(ExecPlan, bool, &str); 3] = [
            (
                ExecPlan {
                    id: String::new(),
                    ..full.clone()
                },
                true,
                "unbound_plan",
            ),
            (
                ExecPlan {
                    issued_at: None,
                    ..full.clone()
                },
                true,
                "no_issued_at",
            ),
            (full.clone(), false, "unbound_plan"),
        ];
        for (plan, pod_has_creation, want) in rows {
            let (text, sig) = signed(plan);
            let mut f = facts(&text, Some(&sig));
            if !pod_has_creation {
                f.created = None;
            }
            let got = verify(&f, Some(&keys)).unwrap_err();
            assert_eq!(got.metric_reason(), want, "{got}");
            assert!(got.to_string().contains("is missing"), "{got}");
        }
        let (text, sig) = signed(full);
        assert!(verify(&facts(&text, Some(&sig)), Some(&keys)).is_ok());
    }

    #[test]
    fn a_status_is_trusted_only_with_the_controllers_signature() {
        let keys = PlanKeys::new(KEY, None).unwrap();
        let text = plan_text("2026-12-03T10:00:00Z");
        let binding = PodBinding {
            namespace: "shop",
            name: "web-x7k2p",
            generate_name: "web-",
        };
        let sig = keys.sign_plan(binding, &text);
        let status = r#"{"hooks":[]}"#;
        let status_sig = keys.sign_status("u1", status);
        let mut f = facts(&text, Some(&sig));
        f.status = Some(status);
        f.status_signature = Some(&status_sig);
        assert!(verify(&f, Some(&keys)).unwrap().status.is_some());
        f.status_signature = None;
        assert!(matches!(
            verify(&f, Some(&keys)),
            Err(Rejection::ForgedStatus(_))
        ));
        f.status = Some(r#"{"hooks":[{"x":1}]}"#);
        f.status_signature = Some(&status_sig);
        assert!(matches!(
            verify(&f, Some(&keys)),
            Err(Rejection::ForgedStatus(SignatureError::Mismatch))
        ));
    }
}
