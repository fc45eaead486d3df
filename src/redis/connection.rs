//! One connection to a Redis deployment, standalone or a Redis Cluster, found out from the
//! server itself (`INFO cluster`, `cluster_enabled:1`): the same URIs reach either.
//!
//! Standalone: the `redis` crate's `ConnectionManager`, which reconnects by itself.
//! Cluster: its cluster client, which follows `MOVED` and `ASK` redirections and the new
//! topology after a failover (Redis Cluster specification, "Redirection and resharding").

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// A connection to a standalone Redis or a Redis Cluster. Cheap to clone: clones share
/// the underlying connections.
#[derive(Clone)]
pub enum Connection {
    /// One server (or a primary behind one address).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(_) => "Connection::Single",
            Connection::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl Connection {
    /// Connects to the deployment at `uris` (`redis://` or `rediss://`, user, password
    /// and db in the URI; several addresses for a cluster's seed nodes): asks the first
    /// address that answers whether cluster mode is on and opens the matching client.
    ///
    /// # Errors
    /// The last address's error when none answers (refused, AUTH refused, TLS), or the
    /// cluster client's error.
    pub async fn open(uris: &[String]) -> Result<Connection, RedisError> {
        let mut last = None;
        for uri in uris {
            match single(uri).await {
                Ok(mut conn) => {
                    check_version(&mut conn).await?;
                    return if cluster_enabled(&mut conn).await? {
                        cluster(uris).await
                    } else {
                        Ok(Connection::Single(conn))
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::InvalidClientConfig, "no Redis URI given"))
        }))
    }
}

/// A reconnecting connection to the one server of `uri`.
async fn single(uri: &str) -> Result<ConnectionManager, RedisError> {
    let client = redis::Client::open(uri)?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(10)))
        .set_response_timeout(Some(std::time::Duration::from_secs(30)))
        .set_number_of_retries(2);
    client.get_connection_manager_with_config(config).await
}

/// A cluster connection seeded with `uris`.
async fn cluster(uris: &[String]) -> Result<Connection, RedisError> {
    let client = redis::cluster::ClusterClientBuilder::new(uris.to_vec())
        .connection_timeout(std::time::Duration::from_secs(10))
        .response_timeout(std::time::Duration::from_secs(30))
        .build()?;
    Ok(Connection::Cluster(client.get_async_connection().await?))
}

/// The oldest Redis the router works with: `XPENDING … IDLE` came in 6.2.
pub const MIN_VERSION: (u32, u32) = (6, 2);

/// Refuses a server older than [`MIN_VERSION`] (`INFO server`, `redis_version`), saying
/// which version is needed and why.
async fn check_version(conn: &mut ConnectionManager) -> Result<(), RedisError> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    let version = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))
        .unwrap_or("")
        .to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if found >= MIN_VERSION {
        return Ok(());
    }
    Err(RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "Redis is too old",
        format!(
            "the server is Redis {version}; the retry router needs Redis {}.{} or later (XPENDING with IDLE), Redis 7 is recommended",
            MIN_VERSION.0, MIN_VERSION.1
        ),
    )))
}

/// Whether the server of `conn` runs in cluster mode (`INFO cluster`).
async fn cluster_enabled(conn: &mut ConnectionManager) -> Result<bool, RedisError> {
    let info: String = redis::cmd("INFO").arg("cluster").query_async(conn).await?;
    Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}
