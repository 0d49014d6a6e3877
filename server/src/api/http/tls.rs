//! The HTTP port over TLS: an [`axum::serve::Listener`] that hands axum connections whose
//! handshake is done, with the client's certificate (if it sent one) as connect info.
//!
//! Handshakes run in their own tasks, with a deadline, so a slow or silent client never holds
//! up the accept loop; at most [`HANDSHAKES_MAX`] run at once (beyond: the connection is
//! dropped).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at most.
pub const HANDSHAKES_MAX: usize = 256;

/// Who is at the other end of an HTTPS connection.
#[derive(Clone, Debug)]
pub struct HttpPeer {
    pub addr: SocketAddr,
    /// The leaf of the client's certificate chain (DER), verified against the client CA.
    pub certificate: Option<Arc<Vec<u8>>>,
}

impl Connected<IncomingStream<'_, TlsListener>> for HttpPeer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> HttpPeer {
        stream.remote_addr().clone()
    }
}

/// Accepts TCP connections and yields them once their TLS handshake succeeded.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, HttpPeer)>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(HANDSHAKES_MAX);
        let acceptor = TlsAcceptor::from(config);
        let in_progress = Arc::new(AtomicUsize::new(0));
        let accept_task = tokio::spawn(async move {
            loop {
                let (tcp, addr) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "http: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if in_progress.fetch_add(1, Ordering::AcqRel) >= HANDSHAKES_MAX {
                    in_progress.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                let (acceptor, tx, in_progress) =
                    (acceptor.clone(), tx.clone(), in_progress.clone());
                tokio::spawn(async move {
                    let _ = tcp.set_nodelay(true);
                    let done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                    in_progress.fetch_sub(1, Ordering::AcqRel);
                    match done {
                        Ok(Ok(stream)) => {
                            let certificate = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|chain| chain.first())
                                .map(|leaf| Arc::new(leaf.as_ref().to_vec()));
                            let _ = tx.send((stream, HttpPeer { addr, certificate })).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%addr, %error, "http: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%addr, "http: TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            local,
            ready,
            accept_task,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = HttpPeer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accept task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<HttpPeer> {
        Ok(HttpPeer {
            addr: self.local,
            certificate: None,
        })
    }
}
