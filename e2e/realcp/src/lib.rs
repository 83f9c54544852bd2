#![forbid(unsafe_code)]
//! A real Kubernetes control plane for tests, from binaries built out of pinned Go modules
//! (see `e2e/realcp/README.md`): etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kwok (a fake kubelet: pods on node `kwok-0` become Running, and `pods/exec` runs the command on
//! this host), all on 127.0.0.1 with fresh ports and a throwaway PKI. [`Velero`] adds Velero with
//! a moto S3 store, [`CertManager`] cert-manager; [`Options::service_proxy`] lets the API server
//! reach a Service-referenced webhook on this host, through a proxy on 127.0.0.1. [`Prometheus`]
//! scrapes what runs on the host and answers PromQL.
//!
//! ```no_run
//! let cp = realcp::ControlPlane::start(realcp::Options::default())?;
//! let out = cp.kubectl(["get", "nodes"]);
//! assert!(out.status.success());
//! # anyhow::Ok(())
//! ```
//!
//! Every process runs in its own process group and is killed when the [`ControlPlane`] (or
//! [`Velero`]) is dropped, panics included, and by the kernel if the test process itself dies.
//! The work dir (logs, PKI, kubeconfigs, pod work dirs) is removed on drop unless `REALCP_KEEP=1`.
//!
//! The binaries come from `e2e/realcp/build.sh`, which [`ControlPlane::start`] runs itself when
//! they are missing or stale: a cold build takes tens of minutes and needs Go and the module proxy.

mod cache;
mod certmanager;
mod controlplane;
mod egress;
mod host;
mod pki;
mod process;
mod prometheus;
mod util;
mod velero;

pub use cache::{cache_dir, pinned_kubectl};
pub use certmanager::CertManager;
pub use controlplane::{ApiServer, ControlPlane, Options, floor_version};
pub use host::{HostCommand, HostProcess};
pub use prometheus::{Prometheus, pinned_prometheus, pinned_promtool};
pub use util::free_port;
pub use velero::Velero;

/// The node kwok simulates; pods are scheduled onto it.
pub const NODE: &str = "kwok-0";
