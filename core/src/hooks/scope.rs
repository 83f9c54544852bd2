//! Which pods are restored pods (docs/behaviour.md §1).

use super::labels::LabelLookup;
use crate::config::EngineConfig;

/// How a pod came into scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeVia {
    /// The pod carries the restore pod label: the restore tool (Velero) created it.
    PodLabel,
    /// The pod was created in a namespace labelled as a restore namespace.
    NamespaceLabel,
}

/// The restore a restored pod belongs to and what brought it into scope (docs/behaviour.md §1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreScope {
    /// The restore name as the label value gives it (a hashed long name is resolved to the full
    /// Velero Restore name later, §1.2).
    pub restore: String,
    /// Which label decided; under `--velero-hooks defer` it decides the hook sources (§3.3).
    pub via: ScopeVia,
}

/// The restore a pod belongs to, if any. The pod label wins over the namespace label; an empty
/// label value names no restore; a pod in an excluded namespace is never in scope, whatever its
/// labels say.
pub fn restore_scope<P: LabelLookup, N: LabelLookup>(
    namespace: &str,
    pod_labels: Option<&P>,
    namespace_labels: Option<&N>,
    config: &EngineConfig,
) -> Option<RestoreScope> {
    if config.excluded_namespaces.iter().any(|n| n == namespace) {
        return None;
    }
    let named = |labels: Option<&dyn LabelLookup>, key: &str| {
        labels
            .and_then(|l| l.label(key))
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    if let Some(restore) = named(pod_labels.map(|l| l as _), &config.restore_label) {
        return Some(RestoreScope {
            restore,
            via: ScopeVia::PodLabel,
        });
    }
    named(
        namespace_labels.map(|l| l as _),
        &config.restore_namespace_label,
    )
    .map(|restore| RestoreScope {
        restore,
        via: ScopeVia::NamespaceLabel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::types::Labels;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn scope_rules() {
        let cfg = EngineConfig::default();
        let pod_r1 = l(&[("velero.io/restore-name", "r1"), ("app", "db")]);
        let ns_r2 = l(&[("restore-hooks.dev/restore", "r2")]);
        type Case<'a> = (Option<Labels>, Option<Labels>, Option<(&'a str, ScopeVia)>);
        let cases: Vec<Case> = vec![
            (None, None, None),
            (Some(l(&[("app", "db")])), Some(l(&[("team", "x")])), None),
            (Some(pod_r1.clone()), None, Some(("r1", ScopeVia::PodLabel))),
            (
                None,
                Some(ns_r2.clone()),
                Some(("r2", ScopeVia::NamespaceLabel)),
            ),
            (
                Some(pod_r1.clone()),
                Some(ns_r2.clone()),
                Some(("r1", ScopeVia::PodLabel)),
            ),
            (
                Some(l(&[("velero.io/restore-name", "")])),
                Some(ns_r2.clone()),
                Some(("r2", ScopeVia::NamespaceLabel)),
            ),
            (None, Some(l(&[("restore-hooks.dev/restore", "")])), None),
        ];
        for (pod, ns, want) in cases {
            let got = restore_scope("shop", pod.as_ref(), ns.as_ref(), &cfg);
            let want = want.map(|(r, via)| RestoreScope {
                restore: r.into(),
                via,
            });
            assert_eq!(got, want, "pod {pod:?} ns {ns:?}");
        }
        let custom = EngineConfig {
            restore_label: "example.com/restore".into(),
            restore_namespace_label: "example.com/restore-ns".into(),
            ..EngineConfig::default()
        };
        assert_eq!(
            restore_scope("shop", Some(&pod_r1), Some(&ns_r2), &custom),
            None
        );
        let excluding = EngineConfig {
            excluded_namespaces: vec!["kube-system".into()],
            ..EngineConfig::default()
        };
        assert!(restore_scope("shop", Some(&pod_r1), None::<&Labels>, &excluding).is_some());
        assert_eq!(
            restore_scope("kube-system", Some(&pod_r1), Some(&ns_r2), &excluding),
            None
        );
    }
}
