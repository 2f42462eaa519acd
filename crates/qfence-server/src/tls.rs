//! Serving the API over HTTPS: a listener that completes TLS handshakes off the accept loop
//! (a slow or silent client cannot hold up the others) and hands finished streams to
//! `axum::serve`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// How long a client has to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections waiting to be served, at most.
const BACKLOG: usize = 64;

/// A TLS listener for [`axum::serve`]. Dropping it stops accepting.
#[derive(Debug)]
pub struct TlsListener {
    local: SocketAddr,
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    stop: CancellationToken,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TlsListener {
    /// Starts accepting on `tcp` with `config` (its ALPN is set to HTTP/1.1).
    pub fn new(tcp: TcpListener, config: rustls::ServerConfig) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let mut config = config;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, rx) = mpsc::channel(BACKLOG);
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(tcp, acceptor, tx, stop.clone()));
        Ok(Self { local, rx, stop })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            a = tcp.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "Accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let hs = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
            let tls = tokio::select! {
                () = stop.cancelled() => return,
                r = hs => r,
            };
            match tls {
                Ok(Ok(s)) => {
                    let _ = tx.send((s, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "A TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "A TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Serves `app` over HTTPS on `tcp` until `shutdown` is cancelled, then finishes the calls in
/// flight.
pub async fn serve_tls(
    tcp: TcpListener,
    config: rustls::ServerConfig,
    app: axum::Router,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let listener = TlsListener::new(tcp, config)?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
