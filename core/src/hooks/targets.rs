//! Which containers of a pod an exec hook may target: app containers and native sidecars (init
//! containers with `restartPolicy: Always`, which keep running beside the app). Plain init
//! containers have exited by the time hooks run, so they never are (docs/behaviour.md §3.4).
//! The webhook and the controller both ask this module, so the rule lives once.

/// What a container of the pod is, as far as exec hooks care (docs/behaviour.md §3.4 row 9, §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRole {
    /// An entry of `spec.containers`: an exec target.
    App,
    /// An init container with `restartPolicy: Always`: keeps running, so an exec target.
    NativeSidecar,
    /// Any other init container: it has exited before hooks run, so never an exec target.
    PlainInit,
}

impl ContainerRole {
    /// The role of an init container with this `restartPolicy`.
    pub fn of_init(restart_policy: Option<&str>) -> Self {
        if restart_policy == Some("Always") {
            ContainerRole::NativeSidecar
        } else {
            ContainerRole::PlainInit
        }
    }

    /// Whether an exec hook may target a container of this role (app containers and native
    /// sidecars).
    pub fn is_exec_target(self) -> bool {
        !matches!(self, ContainerRole::PlainInit)
    }
}

/// The exec-relevant shape of a pod: every container's name and role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecTargets {
    /// In pod order: app containers first, then init containers.
    containers: Vec<(String, ContainerRole)>,
}

impl ExecTargets {
    /// The targets of a pod from its app container names (in `spec.containers` order) and its init
    /// containers' names with their `restartPolicy`.
    pub fn new<'a>(
        app: impl IntoIterator<Item = &'a str>,
        init: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Self {
        let mut containers: Vec<(String, ContainerRole)> = app
            .into_iter()
            .map(|n| (n.to_string(), ContainerRole::App))
            .collect();
        containers.extend(
            init.into_iter()
                .map(|(n, policy)| (n.to_string(), ContainerRole::of_init(policy))),
        );
        Self { containers }
    }

    /// The role of the container called `name`; `None` when the pod has no such container.
    pub fn role(&self, name: &str) -> Option<ContainerRole> {
        self.containers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| *r)
    }

    /// The default target: the pod's first app container.
    pub fn first_app(&self) -> Option<&str> {
        self.containers
            .iter()
            .find(|(_, r)| *r == ContainerRole::App)
            .map(|(n, _)| n.as_str())
    }

    /// Names of the valid targets, for messages.
    pub fn target_names(&self) -> Vec<&str> {
        self.containers
            .iter()
            .filter(|(_, r)| r.is_exec_target())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Why `name` cannot be targeted, if it cannot.
    pub fn check(&self, name: &str) -> Result<(), TargetError> {
        match self.role(name) {
            Some(role) if role.is_exec_target() => Ok(()),
            Some(_) => Err(TargetError::PlainInit(name.to_string())),
            None => Err(TargetError::Missing {
                name: name.to_string(),
                targets: self.target_names().join(", "),
            }),
        }
    }
}

/// Why an exec hook cannot target the container it names: invalid for an annotation hook, and for
/// a spec hook `PlainInit` is invalid while `Missing` makes it not applicable (docs/behaviour.md
/// §3.4 rows 8-9, §3.5).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "exec hook targets {0:?}, a plain init container; exec hooks can only target app \
         containers and native sidecars (init containers with restartPolicy: Always)"
    )]
    /// The named container is a plain init container (the name is the payload).
    PlainInit(String),
    #[error(
        "exec hook targets container {name:?}, which the pod does not have (containers: {targets})"
    )]
    /// The pod has no container with that name.
    Missing {
        /// The container the hook names.
        name: String,
        /// The pod's valid targets, comma-separated, for the message.
        targets: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_containers_and_native_sidecars_are_targets() {
        let t = ExecTargets::new(
            ["db", "metrics"],
            [("init", None), ("proxy", Some("Always"))],
        );
        assert_eq!(t.first_app(), Some("db"));
        assert!(t.check("db").is_ok() && t.check("proxy").is_ok());
        assert_eq!(t.check("init"), Err(TargetError::PlainInit("init".into())));
        assert_eq!(
            t.check("nope").unwrap_err().to_string(),
            "exec hook targets container \"nope\", which the pod does not have (containers: db, metrics, proxy)"
        );
        assert_eq!(ExecTargets::default().first_app(), None);
    }
}
