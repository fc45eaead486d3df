//! A TCP proxy in front of a real endpoint (the RabbitMQ management API), so a test can
//! take "the broker" away from the operator and bring it back on the same address
//! without stopping the shared broker other tests use.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// A running (or stopped) proxy to `target` on a fixed local address.
pub struct Proxy {
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
    target: String,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts a proxy to `target` (`host:port`) on a free local port.
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let mut p = Proxy {
            addr,
            target: target.to_string(),
            task: None,
        };
        p.task = Some(tokio::spawn(serve(listener, p.target.clone())));
        p
    }

    /// Stops listening and cuts every open connection: the endpoint is unreachable.
    pub async fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }

    /// Listens again on the same address.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr).await.expect("re-bind proxy");
        self.task = Some(tokio::spawn(serve(listener, self.target.clone())));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Accepts and pipes connections; every connection task belongs to the set, so aborting
/// this task closes them all.
async fn serve(listener: TcpListener, target: String) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let target = target.clone();
        connections.spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(&target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        // Reap finished connections.
        while connections.try_join_next().is_some() {}
    }
}
