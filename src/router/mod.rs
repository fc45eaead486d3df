//! The retry router (docs/ROUTER.md): retries for consumers in any language, with no
//! library. In router mode (`spec.router.enabled`) a DeadLetterQueue's source queue
//! dead-letters into the router inbox `<source>.router`; the router consumes it, reads
//! why each message failed ([`incoming`]), decides with the RetryPolicy through the very
//! code of the client library ([`crate::client::Republisher`]), republishes to the
//! message's retry tier or to the dead-letter exchange with a publisher confirm and
//! `mandatory`, and acks the original only after the confirm ([`worker`]). A process runs
//! one router per DeadLetterQueue in a [`Fleet`]; several processes may consume one inbox
//! at once (competing consumers). A Redis DeadLetterQueue's router ([`redis`]) sweeps its
//! stream instead (docs/REDIS.md).

pub mod fleet;
pub mod incoming;
pub mod metrics;
pub mod redis;
pub mod sources;
pub mod worker;

pub use fleet::{Fleet, RouterTarget};
pub use metrics::RouterMetrics;
pub use redis::RedisTarget;
pub use worker::{RouterError, Target};
