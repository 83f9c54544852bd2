//! Which containers of a pod an exec hook may target: app containers and native sidecars (init
//! containers with `restartPolicy: Always`, which keep running beside the app). Plain init
//! containers have exited by the time hooks run, so they never are (docs/behaviour.md §3.4).
//! The webhook and the controller both ask this module, so the rule lives once.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRole {
    App,
    NativeSidecar,
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

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "exec hook targets {0:?}, a plain init container; exec hooks can only target app \
         containers and native sidecars (init containers with restartPolicy: Always)"
    )]
    PlainInit(String),
    #[error("exec hook targets container {name:?}, which the pod does not have (containers: {targets})")]
    Missing { name: String, targets: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_containers_and_native_sidecars_are_targets() {
        let t = ExecTargets::new(["db", "metrics"], [("init", None), ("proxy", Some("Always"))]);
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
