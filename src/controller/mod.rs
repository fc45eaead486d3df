//! Kubernetes controller building blocks. So far: status conditions ([`conditions`]),
//! which the standalone runner also uses for its verdict line, and the RetryPolicy's
//! desired status ([`retry_policy`], `RetryPolicy::desired_status`); the kube-runtime
//! controllers themselves are the next milestone (docs/ARCHITECTURE.md).

pub mod conditions;
pub mod retry_policy;
