//! Kubernetes controller building blocks. So far: status conditions ([`conditions`]),
//! which the standalone runner also uses for its verdict line; the kube-runtime
//! controllers themselves are the next milestone (docs/ARCHITECTURE.md).

pub mod conditions;
