//! The HTTPS admission webhook: routing, TLS and certificate reload. It never decides hooks:
//! that is [`review`]'s job, through the hook engine.

pub mod review;
