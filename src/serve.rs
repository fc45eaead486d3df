//! The life cycle of the HTTP server of `/metrics`, `/healthz` and `/readyz`
//! ([`crate::metrics::router`]'s routes), the same for every driver: bind, serve until a
//! [`CancellationToken`] is cancelled, then wait for it to end.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, Readiness};

/// A running metrics server.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Binds `addr` ([`crate::metrics::bind`]) and serves `metrics` and `readiness` on a task
/// of its own until `shutdown` is cancelled or [`MetricsServer::stop`] is called (in-flight
/// requests end first). Logs the bound address.
///
/// # Errors
/// The bind error (address in use, permission), naming the address
/// (`--metrics-bind-address ADDR: …`).
pub async fn start(
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: &CancellationToken,
) -> std::io::Result<MetricsServer> {
    let stop = shutdown.child_token();
    let (addr, server) =
        crate::metrics::bind(addr, metrics, readiness, stop.clone().cancelled_owned()).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    Ok(MetricsServer {
        addr,
        stop,
        task: tokio::spawn(server),
    })
}

impl MetricsServer {
    /// The bound address (the port the system chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (when the shutdown token has not already) and waits until the server
    /// has ended. A server that failed is logged as a warning (it is not the driver's
    /// error: the metrics are a side channel).
    pub async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "metrics server failed"),
            Err(e) => tracing::warn!(error = %e, "metrics server task failed"),
            Ok(Ok(())) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn serves_until_the_token_is_cancelled() {
        let shutdown = CancellationToken::new();
        let readiness = Readiness::new("starting");
        readiness.set_ready();
        let server = start(
            "127.0.0.1:0".parse().expect("addr"),
            Metrics::new(),
            readiness,
            &shutdown,
        )
        .await
        .expect("binds");
        let addr = server.addr();
        let answer = get(addr, "/readyz").await.expect("answers");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(10), server.stop())
            .await
            .expect("stops after the shutdown token");
        assert!(get(addr, "/readyz").await.is_err(), "no longer served");
    }

    #[tokio::test]
    async fn stop_ends_it_and_a_bind_error_names_the_address() {
        let shutdown = CancellationToken::new();
        let server = start(
            "127.0.0.1:0".parse().expect("addr"),
            Metrics::new(),
            Readiness::new("starting"),
            &shutdown,
        )
        .await
        .expect("binds");
        let addr = server.addr();
        let again = start(addr, Metrics::new(), Readiness::new("starting"), &shutdown).await;
        let e = again.expect_err("the port is taken");
        assert!(
            e.to_string()
                .starts_with(&format!("--metrics-bind-address {addr}: ")),
            "{e}"
        );
        tokio::time::timeout(std::time::Duration::from_secs(10), server.stop())
            .await
            .expect("stop ends it");
        assert!(
            !shutdown.is_cancelled(),
            "stopping one server is not a shutdown"
        );
    }
}
