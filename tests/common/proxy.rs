//! A TCP proxy in front of a real endpoint (the RabbitMQ management API), so a test can
//! take "the broker" away from the operator and bring it back on the same address
//! without stopping the shared broker other tests use.
//! [`Coalescing`] instead holds what a client sends until it waits for a reply;
//! [`Freezing`] stops passing the broker's replies once a client has sent a marker.

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

/// A proxy to `target` on a thread of its own that holds what a client sends on the
/// first connection until the client has been quiet for `quiet`, then passes it on in one
/// piece; replies, and later connections, pass at once. Whatever a client sends on that
/// connection without waiting for a reply there (acks, nacks, then `channel.close`)
/// reaches the broker in one read, as from a fast client whose broker commits slowly.
/// Every request on it that waits for a reply takes `quiet` longer.
pub struct Coalescing {
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Coalescing {
    /// Starts one to `target` (`host:port`) on a free local port.
    pub fn start(target: &str, quiet: std::time::Duration) -> Coalescing {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        listener.set_nonblocking(true).expect("nonblocking");
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let target = target.to_string();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    () = serve_coalescing(listener, target, quiet) => {}
                    _ = stopped => {}
                }
            });
        });
        Coalescing {
            addr,
            stop: Some(stop),
        }
    }
}

impl Drop for Coalescing {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn serve_coalescing(listener: TcpListener, target: String, quiet: std::time::Duration) {
    let mut connections = JoinSet::new();
    let mut first = true;
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let target = target.clone();
        let held = std::mem::take(&mut first);
        connections.spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(&target).await else {
                return;
            };
            if !held {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                return;
            }
            let (mut client_in, mut client_out) = inbound.into_split();
            let (mut broker_in, mut broker_out) = outbound.into_split();
            let replies =
                tokio::spawn(async move { tokio::io::copy(&mut broker_in, &mut client_out).await });
            hold_until_quiet(&mut client_in, &mut broker_out, quiet).await;
            let _ = replies.await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// Copies `from` to `to`, each burst once `from` has sent nothing for `quiet`.
async fn hold_until_quiet(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    quiet: std::time::Duration,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    let mut held = Vec::new();
    loop {
        let read = if held.is_empty() {
            from.read(&mut buf).await
        } else {
            match tokio::time::timeout(quiet, from.read(&mut buf)).await {
                Ok(read) => read,
                Err(_quiet) => {
                    if to.write_all(&held).await.is_err() {
                        return;
                    }
                    held.clear();
                    continue;
                }
            }
        };
        match read {
            Ok(n) if n > 0 => held.extend_from_slice(&buf[..n]),
            _ => {
                let _ = to.write_all(&held).await;
                let _ = to.shutdown().await;
                return;
            }
        }
    }
}

/// A proxy to `target` that passes everything both ways until a client sends `marker`
/// (e.g. in the body of a message it publishes), then passes nothing more from the broker
/// to the clients: the broker's replies from then on (the publisher confirm of that
/// message, so the client never acks what it moved) are lost, as on a dying network.
/// When the broker closes a connection (its node killed), the proxy closes it to the
/// client. The client's bytes are checked before they are passed on, so no reply to the
/// marked frames can slip through.
pub struct Freezing {
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: JoinHandle<()>,
}

impl Freezing {
    /// Starts one to `target` (`host:port`) on a free local port.
    pub async fn start(target: &str, marker: &[u8]) -> Freezing {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn(serve_freezing(
            listener,
            target.to_string(),
            marker.to_vec(),
            frozen.clone(),
        ));
        Freezing { addr, frozen, task }
    }

    /// `true` once a client has sent the marker.
    pub fn frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Freezing {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_freezing(
    listener: TcpListener,
    target: String,
    marker: Vec<u8>,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut connections = JoinSet::new();
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let (target, marker, frozen) = (target.clone(), marker.clone(), frozen.clone());
        connections.spawn(async move {
            let Ok(outbound) = TcpStream::connect(&target).await else {
                return;
            };
            let (mut client_in, mut client_out) = inbound.into_split();
            let (mut broker_in, mut broker_out) = outbound.into_split();
            let up = async {
                let (mut buf, mut seen) = (vec![0u8; 64 * 1024], Vec::new());
                while let Ok(n @ 1..) = client_in.read(&mut buf).await {
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(marker.len()).any(|w| w == marker.as_slice()) {
                        frozen.store(true, Ordering::SeqCst);
                    }
                    let keep = seen.len().saturating_sub(marker.len());
                    seen.drain(..keep);
                    if broker_out.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            };
            let down = async {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = broker_in.read(&mut buf).await {
                    if !frozen.load(Ordering::SeqCst)
                        && client_out.write_all(&buf[..n]).await.is_err()
                    {
                        return;
                    }
                }
            };
            tokio::select! {
                () = up => {}
                () = down => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
}
