//! Hook sources as the servers and `inject` load them: files (`static_files`) and the cluster's
//! watch caches (`cluster`), behind the core's catalog trait.

pub use restore_hooks_core::catalog::*;

pub mod cluster;
pub mod static_files;

pub use static_files::load_static;
