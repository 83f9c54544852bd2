//! The key that signs exec plans and statuses (docs/behaviour.md §9.2): one per installation,
//! shared by every replica, surviving restarts and certificate rotation.
//!
//! It lives in a Secret (data `current`, optional `previous`) that the first replica creates with
//! 32 random bytes when it is missing, and that every replica watches: a rotation (move `current`
//! to `previous`, write a new `current`) reaches running replicas without a restart, and plans
//! signed under the previous key keep verifying. A Secret, not a chart-generated value, because
//! `helm template` (GitOps) would otherwise generate a new key at every render and invalidate every
//! pending plan.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use restore_hooks_core::hooks::signing::{MIN_KEY_BYTES, PlanKeys};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::sync::watch;

/// The Secret's data key holding the key that signs: new plans and statuses are signed with it.
pub const CURRENT: &str = "current";
/// The Secret's optional data key holding the key before the last rotation: what it signed still
/// verifies.
pub const PREVIOUS: &str = "previous";

/// The installation's keys as they are now: `None` until loaded.
#[derive(Clone)]
pub struct KeyRing {
    rx: watch::Receiver<Option<Arc<PlanKeys>>>,
    /// False when running without a key is the configuration (`--no-cluster` without
    /// `--plan-key-file`): then the missing key is no reason to be unready.
    required: bool,
}

impl KeyRing {
    /// Keys that never change (files, tests).
    pub fn fixed(keys: PlanKeys) -> Self {
        let (_tx, rx) = watch::channel(Some(Arc::new(keys)));
        Self { rx, required: true }
    }

    /// No key, by configuration: plans are issued unsigned and no controller runs them.
    pub fn none() -> Self {
        let (_tx, rx) = watch::channel(None);
        Self {
            rx,
            required: false,
        }
    }

    /// Keys that are required but arrive later, through the returned sender.
    pub fn pending() -> (watch::Sender<Option<Arc<PlanKeys>>>, Self) {
        let (tx, rx) = watch::channel(None);
        (tx, Self { rx, required: true })
    }

    /// The keys as they are now; `None` until loaded, or when running without a key. Take them
    /// afresh for each signature or check rather than keeping them: a rotation replaces them.
    pub fn current(&self) -> Option<Arc<PlanKeys>> {
        self.rx.borrow().clone()
    }

    /// Whether keys are loaded.
    pub fn is_loaded(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Required but not loaded (yet): no plan can be signed.
    pub fn is_missing(&self) -> bool {
        self.required && !self.is_loaded()
    }

    /// Ready as far as keys go: loaded, or deliberately absent.
    pub fn is_ready(&self) -> bool {
        !self.required || self.is_loaded()
    }
}

/// Reads `--plan-key-file` (and `--previous-plan-key-file`).
pub fn from_files(current: &Path, previous: Option<&Path>) -> anyhow::Result<PlanKeys> {
    let read = |p: &Path| {
        std::fs::read(p).with_context(|| format!("cannot read plan key file {}", p.display()))
    };
    let current = read(current)?;
    let previous = previous.map(read).transpose()?;
    PlanKeys::new(&current, previous.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A fresh random key.
pub fn generate() -> anyhow::Result<Vec<u8>> {
    let mut key = vec![0u8; MIN_KEY_BYTES];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    Ok(key)
}

/// The keys in a Secret's data.
pub fn from_secret(secret: &Secret) -> anyhow::Result<PlanKeys> {
    let data = secret.data.as_ref();
    let get = |k: &str| data.and_then(|d| d.get(k)).map(|b| b.0.as_slice());
    let current = get(CURRENT).with_context(|| {
        format!(
            "Secret {} has no data key {CURRENT:?}",
            secret.metadata.name.as_deref().unwrap_or_default()
        )
    })?;
    PlanKeys::new(current, get(PREVIOUS)).map_err(|e| {
        anyhow::anyhow!(
            "Secret {}: {e}",
            secret.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// A new plan id (docs/behaviour.md §5.2): 96 random bits, base64url without padding (16
/// characters). The controller holds each id for the first pod that carries it, so ids must never
/// repeat: random, never derived from anything a caller of the webhook controls.
pub fn new_plan_id() -> anyhow::Result<String> {
    use base64::Engine;
    let mut id = [0u8; 12];
    SystemRandom::new()
        .fill(&mut id)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id))
}

/// Keys from a Secret, kept up to date. `create`: make the Secret with a random key when it is
/// missing (the controller and `serve`; a split webhook only reads it and waits).
pub struct SecretKeys {
    api: Api<Secret>,
    name: String,
    create: bool,
}

impl SecretKeys {
    /// The Secret `namespace/name` (`--plan-key-namespace`, `--plan-key-secret`); `create` as
    /// above. Nothing is read until [`SecretKeys::start`].
    pub fn new(client: kube::Client, namespace: &str, name: &str, create: bool) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            create,
        }
    }

    /// Starts loading; the returned future keeps the ring current until dropped.
    pub fn start(
        self,
    ) -> (
        KeyRing,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (tx, ring) = KeyRing::pending();
        (ring, self.run(tx))
    }

    async fn ensure(&self) -> anyhow::Result<()> {
        if !self.create || self.api.get_opt(&self.name).await?.is_some() {
            return Ok(());
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                // A backup must not carry the key (whoever restores it could sign plans for
                // this installation): Velero skips objects with this label.
                labels: Some(
                    [
                        ("app.kubernetes.io/component".to_string(), "plan-key".to_string()),
                        ("velero.io/exclude-from-backup".to_string(), "true".to_string()),
                    ]
                    .into(),
                ),
                annotations: Some(
                    [(
                        "restore-hooks.dev/description".to_string(),
                        "Signs restore-hooks exec plans. Rotate: move `current` to `previous`, write \
                         32 new random bytes to `current`; never delete while restores run."
                            .to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([(CURRENT.to_string(), ByteString(generate()?))].into()),
            type_: Some("Opaque".to_string()),
            ..Default::default()
        };
        match self.api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(secret = %self.name, "created the plan key Secret with a new random key");
                Ok(())
            }
            // Another replica was faster: use its key.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn run(self, tx: watch::Sender<Option<Arc<PlanKeys>>>) {
        // Jittered: replicas started together do not retry in step.
        let mut backoff = crate::backoff::ApiBackoff::new(
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(30),
        );
        while let Err(e) = self.ensure().await {
            tracing::warn!(secret = %self.name, error = %format!("{e:#}"), "cannot create the plan key Secret; retrying");
            tokio::time::sleep(backoff.after(e.downcast_ref::<kube::Error>())).await;
        }
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut events =
            crate::backoff::watch_backoff(watcher::watcher(self.api.clone(), config)).boxed();
        let mut warned_missing = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(secret) | Event::InitApply(secret)) => match from_secret(&secret) {
                    Ok(keys) => {
                        let changed = tx.borrow().as_ref().map(|k| {
                            (
                                k.current_id().to_string(),
                                k.previous_id().map(str::to_string),
                            )
                        }) != Some((
                            keys.current_id().to_string(),
                            keys.previous_id().map(str::to_string),
                        ));
                        if changed {
                            tracing::info!(secret = %self.name, current = keys.current_id(), previous = keys.previous_id().unwrap_or("none"), "plan keys loaded");
                        }
                        tx.send_replace(Some(Arc::new(keys)));
                        warned_missing = false;
                    }
                    Err(e) => {
                        tracing::error!(secret = %self.name, error = %format!("{e:#}"), "the plan key Secret is unusable; keeping the keys loaded before")
                    }
                },
                Ok(Event::InitDone) => {
                    if tx.borrow().is_none() && !warned_missing {
                        warned_missing = true;
                        tracing::warn!(secret = %self.name, "the plan key Secret does not exist yet; not ready until it does");
                    }
                }
                Ok(Event::Delete(_)) => {
                    tracing::error!(secret = %self.name, "the plan key Secret was deleted; keeping the keys in memory (a restart without it creates a new key and pending plans stop verifying)")
                }
                Ok(Event::Init) => {}
                Err(e) => {
                    tracing::warn!(secret = %self.name, error = %e, "watching the plan key Secret failed; retrying")
                }
            }
        }
    }
}
