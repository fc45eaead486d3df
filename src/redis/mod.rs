//! The Redis adapter (docs/REDIS.md): retries and dead letters for work kept in Redis, in
//! the stream layout (a stream read by a consumer group) — with the same RetryPolicy and
//! the same `dlq-*` contract as on RabbitMQ.
//!
//! - The keys it derives from a source, all in the source's hash slot, are a domain rule:
//!   [`crate::redis_keys`].
//! - [`scripts`]: the Lua scripts that make each move one atomic step on the server.
//! - [`fields`]: the `dlq-*` contract as stream fields.
//! - [`stream`]: the stream layout's reads and moves.
//! - [`router`]: the retry router's sweep.
//! - [`topology`]: what `apply` makes sure of: key types, ownership record, consumer group.
//! - [`connection`]: one connection to a standalone Redis or a Redis Cluster.

pub mod connection;
pub mod fields;
pub mod router;
pub mod scripts;
pub mod stream;
pub mod topology;
