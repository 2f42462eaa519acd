//! TLS identities and the HTTPS server loop every simulator shares.
//!
//! Real BMCs and Proxmox nodes serve self-signed certificates that operators pin, so each
//! simulator gets a [`TlsIdentity`] generated in-process (rcgen with ring) and publishes its
//! SHA-256 fingerprint in the form qfence's `tls: {pin: "sha256:HEX"}` expects: lower-case hex
//! of the certificate's DER, 64 digits, no colons.
//!
//! The server loop is ours rather than `axum::serve` over a plain TCP listener because the
//! faults live below HTTP: an unreachable simulator refuses or swallows connections before the
//! TLS handshake, a "wrong certificate" simulator presents a second identity during the
//! handshake, and switching either fault cuts the connections already open so that pooled
//! client connections cannot hide it.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::faults::{Faults, Gate};

/// Everything that can go wrong while starting a simulator.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// rcgen could not make a certificate.
    #[error("cannot generate a self-signed certificate for {names:?}: {source}")]
    Certificate {
        /// The subject alternative names asked for.
        names: Vec<String>,
        /// What rcgen said.
        source: rcgen::Error,
    },
    /// rustls refused the key or the configuration.
    #[error("cannot build the TLS server configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// A TLS setup step failed, described in words (the FortiOS simulator's form).
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },
    /// A PEM certificate or key could not be read.
    #[error("cannot read the PEM {what}: {reason}")]
    Pem {
        /// `certificate` or `private key`.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The initial state names something that does not exist or repeats a name.
    #[error("invalid initial state: {0}")]
    InvalidState(String),
    /// A lab command names something the lab does not have, or asks what cannot be now.
    #[error("{0}")]
    Refused(String),
    /// A lab file could not be written or read (`qfence lab`).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// An orchestrator of the lab did not start or stop as asked (`qfence lab`).
    #[error("orchestrator {name}: {reason}")]
    Orchestrator {
        /// The orchestrator.
        name: String,
        /// What went wrong, and where its log is.
        reason: String,
    },
}

/// A certificate and its private key, generated in-process or loaded by the caller.
#[derive(Clone)]
pub struct TlsIdentity {
    cert_der: CertificateDer<'static>,
    key_der: Arc<Vec<u8>>,
    cert_pem: String,
    key_pem: Arc<String>,
    fingerprint: String,
}

impl fmt::Debug for TlsIdentity {
    // The key stays out of Debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl TlsIdentity {
    /// A fresh self-signed certificate for these DNS names or IP addresses (for example
    /// `["localhost", "127.0.0.1"]`).
    pub fn generate<S: AsRef<str>>(names: &[S]) -> Result<Self, LabError> {
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
        let certified = rcgen::generate_simple_self_signed(names.clone())
            .map_err(|source| LabError::Certificate { names, source })?;
        Ok(Self::from_der(
            certified.cert.der().clone(),
            certified.signing_key.serialize_der(),
            certified.cert.pem(),
            certified.signing_key.serialize_pem(),
        ))
    }

    /// An identity saved earlier with [`TlsIdentity::cert_pem`] and
    /// [`TlsIdentity::key_pem`] (PKCS#8), so that a restarted simulator keeps the
    /// fingerprint a configuration pins.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, LabError> {
        use rustls::pki_types::pem::PemObject as _;
        let cert =
            CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| LabError::Pem {
                what: "certificate",
                reason: e.to_string(),
            })?;
        let key =
            PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| LabError::Pem {
                what: "private key",
                reason: e.to_string(),
            })?;
        let identity = Self::from_der(
            cert,
            key.secret_pkcs8_der().to_vec(),
            cert_pem.to_owned(),
            key_pem.to_owned(),
        );
        // Fail now, not at the first handshake, if the key is unusable.
        identity.certified_key()?;
        Ok(identity)
    }

    /// The identity the lab uses when it has no reason to choose: `localhost` and `127.0.0.1`.
    pub fn loopback() -> Result<Self, LabError> {
        Self::generate(&["localhost", "127.0.0.1"])
    }

    fn from_der(
        cert_der: CertificateDer<'static>,
        pkcs8_key: Vec<u8>,
        cert_pem: String,
        key_pem: String,
    ) -> Self {
        let fingerprint = sha256_fingerprint(&cert_der);
        Self {
            cert_der,
            key_der: Arc::new(pkcs8_key),
            cert_pem,
            key_pem: Arc::new(key_pem),
            fingerprint,
        }
    }

    /// The private key in PKCS#8 PEM, to save the identity (a lab credential, not a
    /// production secret).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// SHA-256 of the certificate's DER, lower-case hex, no colons.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The certificate in PEM, for clients that trust it as a CA file.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The certificate in DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    fn certified_key(&self) -> Result<Arc<CertifiedKey>, LabError> {
        let provider = rustls::crypto::ring::default_provider();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.as_ref().clone()));
        let signing = provider.key_provider.load_private_key(key)?;
        Ok(Arc::new(CertifiedKey::new(
            vec![self.cert_der.clone()],
            signing,
        )))
    }
}

/// `https://ADDR`, with an unspecified bind address (`0.0.0.0`, `::`) replaced by loopback.
pub(crate) fn loopback_url(addr: SocketAddr) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("https://{addr}")
}

/// Lower-case hex SHA-256 of a certificate's DER: the pin format of qfence's configuration.
pub fn sha256_fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Chooses the certificate for each handshake: the real one, or the impostor while the
/// "wrong certificate" fault is on.
#[derive(Debug)]
struct SwitchingResolver {
    real: Arc<CertifiedKey>,
    impostor: Arc<CertifiedKey>,
    faults: Faults,
}

impl ResolvesServerCert for SwitchingResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if self.faults.wrong_certificate() {
            Some(self.impostor.clone())
        } else {
            Some(self.real.clone())
        }
    }
}

/// A running HTTPS server: its address and the means to stop it.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Stops accepting, lets open requests finish (bounded), and waits for the loop to end.
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // Idle keep-alive connections close at once; a request stuck in a fault (a slow
            // BMC) must not hold the caller for longer than this.
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("Simulator did not stop within 5 s; abandoning its connections");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `addr` and serves `router` over TLS with `identity`, subject to `faults`.
pub(crate) async fn serve(
    addr: SocketAddr,
    identity: &TlsIdentity,
    faults: Faults,
    router: Router,
) -> Result<Server, LabError> {
    let impostor = TlsIdentity::generate(&["localhost", "127.0.0.1"])?;
    let resolver = SwitchingResolver {
        real: identity.certified_key()?,
        impostor: impostor.certified_key()?,
        faults: faults.clone(),
    };
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // No session resumption: a resumed session skips the certificate, which would let a
    // client that met the real certificate once walk past the "wrong certificate" fault.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    let acceptor = TlsAcceptor::from(Arc::new(config));

    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|source| LabError::Bind { addr, source })?;
    let local = tcp
        .local_addr()
        .map_err(|source| LabError::Bind { addr, source })?;

    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (closing_tx, closing_rx) = watch::channel(false);
    let (conn_tx, conn_rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(tcp, acceptor, faults, conn_tx, closing_rx));
    let listener = HandshakenListener {
        incoming: conn_rx,
        local,
    };
    let task = tokio::spawn(async move {
        let signal = async move {
            let _ = stop_rx.await;
            let _ = closing_tx.send(true);
        };
        if let Err(error) = axum::serve(listener, router)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::warn!(%error, "Simulator server stopped with an error");
        }
    });
    Ok(Server {
        addr: local,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// Accepts TCP connections, applies the connection-level faults and performs the TLS
/// handshake off the accept path, so one slow client cannot stall the others.
async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    faults: Faults,
    ready: mpsc::Sender<(GuardedStream, SocketAddr)>,
    mut closing: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::debug!(%error, "Simulator accept failed; retrying");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = closing.changed() => return,
        };
        match faults.gate(peer.ip()) {
            Gate::Open => {}
            Gate::Refuse => {
                drop(stream);
                continue;
            }
            Gate::Blackhole => {
                // Hold the socket open and never answer, as a dropped route looks to a
                // client: it waits for its own timeout. Released when the fault changes.
                let faults = faults.clone();
                let mut closing = closing.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = faults.changed() => {}
                        _ = closing.changed() => {}
                    }
                    drop(stream);
                });
                continue;
            }
        }
        let acceptor = acceptor.clone();
        let faults = faults.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let epoch = faults.epoch();
            let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream));
            if let Ok(Ok(tls)) = handshake.await {
                let guarded = GuardedStream {
                    inner: Box::new(tls),
                    faults,
                    peer,
                    epoch,
                };
                let _ = ready.send((guarded, peer)).await;
            }
        });
    }
}

/// Hands axum the connections whose TLS handshake is done.
struct HandshakenListener {
    incoming: mpsc::Receiver<(GuardedStream, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for HandshakenListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(pair) => pair,
            // The accept loop has ended (shutdown): nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// A TLS connection that breaks as soon as a fault makes its peer unreachable or changes the
/// certificate it was opened with, so keep-alive connections cannot outlive a fault.
pub(crate) struct GuardedStream {
    inner: Box<TlsStream<TcpStream>>,
    faults: Faults,
    peer: SocketAddr,
    epoch: u64,
}

impl GuardedStream {
    fn check(&self) -> io::Result<()> {
        if self.faults.epoch() != self.epoch && self.faults.gate(self.peer.ip()) != Gate::Open {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated unreachable",
            ));
        }
        if self.faults.certificate_changed_since(self.epoch) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated certificate change",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
