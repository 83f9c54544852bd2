//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one replica execs hooks.
//!
//! Every write carries the Lease's `metadata.resourceVersion` (a merge patch precondition), so two
//! replicas can never both believe they took the same Lease. Leadership is published on a
//! `watch` channel; it drops to `false` the moment a renewal fails, conflicts or times out, before
//! the Lease has even expired, so the old leader stops starting execs before anyone else may
//! take over. (At-most-once does not depend on this: the status annotation's optimistic
//! concurrency already prevents a double start. The Lease keeps replicas from racing at all.)

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;

/// Which Lease to contend for, as whom, and for how long.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// `--lease-name`; the Lease is created when it does not exist.
    pub name: String,
    /// `--lease-namespace`.
    pub namespace: String,
    /// This replica's `holderIdentity`: unique per replica, or two replicas would both lead.
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub duration: Duration,
}

impl LeaseConfig {
    /// The holder renews three times per lease duration, so one slow or failed renewal does not
    /// lose the Lease.
    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// Non-leaders look at the Lease this often (a released Lease is taken over within this).
    fn retry_every(&self) -> Duration {
        (self.duration / 5).max(Duration::from_millis(100))
    }

    fn seconds(&self) -> i32 {
        self.duration.as_secs_f64().ceil().max(1.0) as i32
    }
}

#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error("the Lease changed under us (conflict)")]
    Conflict,
    #[error("Lease API request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("Lease API request took longer than {0:?}")]
    Timeout(Duration),
}

/// Runs the election until `stop` is cancelled, then releases the Lease if held (clearing the
/// holder, so that another replica takes over at its next look instead of after expiry).
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leader: watch::Sender<bool>,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut elector = Elector {
        api,
        config,
        observed: None,
    };
    let set = |is: bool| {
        metrics.leader.set(i64::from(is));
        leader.send_if_modified(|cur| std::mem::replace(cur, is) != is);
    };
    loop {
        let was = *leader.borrow();
        // Each attempt is bounded well below the lease duration: a hanging API call must not
        // keep us believing we lead after the Lease could have expired.
        let limit = elector.config.duration / 3;
        let result = match tokio::time::timeout(limit, elector.attempt()).await {
            Ok(r) => r,
            Err(_) => Err(LeaseError::Timeout(limit)),
        };
        let wait = match result {
            Ok(true) => {
                if !was {
                    info!(lease = %elector.config.name, identity = %elector.config.identity, "acquired the controller Lease: this replica execs hooks");
                }
                set(true);
                elector.config.renew_every()
            }
            Ok(false) => {
                if was {
                    warn!(lease = %elector.config.name, "lost the controller Lease to another replica");
                }
                set(false);
                elector.config.retry_every()
            }
            Err(e) => {
                if was {
                    warn!(lease = %elector.config.name, error = %e, "could not renew the controller Lease: no new hooks start until it is held again");
                } else if matches!(e, LeaseError::Conflict) {
                    // Another replica wrote the Lease first: routine.
                    debug!(lease = %elector.config.name, error = %e, "Lease attempt lost a race");
                } else {
                    warn!(lease = %elector.config.name, error = %e, "Lease attempt failed; retrying");
                }
                set(false);
                elector.config.retry_every()
            }
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    let held = *leader.borrow();
    set(false);
    if held {
        match tokio::time::timeout(Duration::from_secs(5), elector.release()).await {
            Ok(Ok(())) => {
                info!(lease = %elector.config.name, "released the controller Lease")
            }
            Ok(Err(e)) => {
                warn!(lease = %elector.config.name, error = %e, "could not release the controller Lease; another replica takes over when it expires")
            }
            Err(_) => {
                warn!(lease = %elector.config.name, "releasing the controller Lease timed out; another replica takes over when it expires")
            }
        }
    }
}

struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The resourceVersion of the Lease as last seen, and when it was first seen: a Lease whose
    /// resourceVersion has not moved for a whole lease duration is expired whatever the clocks say.
    observed: Option<(String, Instant)>,
}

impl Elector {
    /// One look at the Lease: create, renew or take it over. `Ok(true)` when we hold it now.
    async fn attempt(&mut self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            return self.create(now).await;
        };
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder == self.config.identity {
            self.patch(
                &rv,
                json!({"renewTime": micro(now), "leaseDurationSeconds": self.config.seconds()}),
            )
            .await?;
            return Ok(true);
        }
        let seen_since = match &self.observed {
            Some((seen_rv, at)) if *seen_rv == rv => *at,
            _ => {
                self.observed = Some((rv.clone(), Instant::now()));
                Instant::now()
            }
        };
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(self.config.duration);
        let renewed_long_ago = spec.renew_time.as_ref().is_none_or(|t| {
            t.0.checked_add(SignedDuration::try_from(duration).unwrap_or_default())
                .is_ok_and(|end| end < now)
        });
        let unchanged_too_long = seen_since.elapsed() > duration;
        if !holder.is_empty() && !renewed_long_ago && !unchanged_too_long {
            return Ok(false);
        }
        if !holder.is_empty() {
            info!(lease = %self.config.name, previous = %holder, "the controller Lease expired; taking it over");
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + 1;
        self.patch(
            &rv,
            json!({
                "holderIdentity": self.config.identity,
                "acquireTime": micro(now),
                "renewTime": micro(now),
                "leaseDurationSeconds": self.config.seconds(),
                "leaseTransitions": transitions,
            }),
        )
        .await?;
        Ok(true)
    }

    async fn create(&self, now: Timestamp) -> Result<bool, LeaseError> {
        let lease: Lease = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "acquireTime": micro(now),
                "renewTime": micro(now),
                "leaseDurationSeconds": self.config.seconds(),
                "leaseTransitions": 0,
            }
        }))
        .expect("a Lease from literal JSON");
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            // Another replica created it first.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn patch(&self, rv: &str, spec: serde_json::Value) -> Result<(), LeaseError> {
        let body = json!({"metadata": {"resourceVersion": rv}, "spec": spec});
        match self
            .api
            .patch(
                &self.config.name,
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(LeaseError::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    /// Clears the holder if it is still us.
    async fn release(&self) -> Result<(), LeaseError> {
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let rv = lease.metadata.resource_version.unwrap_or_default();
        self.patch(
            &rv,
            json!({"holderIdentity": null, "acquireTime": null, "renewTime": null}),
        )
        .await
    }
}

fn micro(t: Timestamp) -> serde_json::Value {
    serde_json::to_value(MicroTime(t)).expect("MicroTime serialises")
}

/// This replica's default identity: the host name, which is the pod name in a cluster. Replicas
/// sharing a host (tests) must pass `--identity`.
pub fn default_identity() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "restore-hooks".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_follows_the_lease_duration() {
        let c = LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            identity: "me".into(),
            duration: Duration::from_millis(1500),
        };
        assert_eq!(c.seconds(), 2, "rounded up to whole seconds on the wire");
        assert_eq!(c.renew_every(), Duration::from_millis(500));
        assert_eq!(c.retry_every(), Duration::from_millis(300));
    }

    #[test]
    fn identity_is_not_empty() {
        assert!(!default_identity().is_empty());
    }
}
