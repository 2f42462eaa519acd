//! The cluster's certificate authority and mutual TLS.
//!
//! `qfence cluster init` makes a CA (ECDSA P-256, ring) and the first node's certificate; each
//! further orchestrator gets its own certificate from the same CA. Both sides of every
//! connection between orchestrators present a certificate and accept only one signed by the
//! cluster CA: a node holding a certificate from another CA is refused in the handshake, in
//! either direction. The CA is the only root; system roots are never consulted.
//!
//! rcgen cannot parse an existing certificate without its `x509-parser` feature, so a loaded CA
//! rebuilds its issuing parameters from the cluster name (the subject is derived from it and
//! nothing else), which yields the same issuer name and key identifier as the stored
//! certificate.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

use crate::error::ClusterError;

/// How long a peer gets to finish a TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs ring as the process-wide rustls provider (never aws-lc). Harmless if already done.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(e: impl fmt::Display) -> ClusterError {
    ClusterError::Tls(e.to_string())
}

fn ca_params(cluster: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "qfence");
    dn.push(DnType::CommonName, format!("qfence cluster CA {cluster}"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// The cluster's certificate authority.
pub struct CertificateAuthority {
    cluster: String,
    key: KeyPair,
    cert_pem: String,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Makes a new CA for the cluster `cluster`.
    pub fn generate(cluster: &str) -> Result<Self, ClusterError> {
        let key = KeyPair::generate().map_err(|e| ClusterError::Ca(e.to_string()))?;
        let cert = ca_params(cluster)
            .self_signed(&key)
            .map_err(|e| ClusterError::Ca(e.to_string()))?;
        Ok(Self {
            cluster: cluster.to_owned(),
            key,
            cert_pem: cert.pem(),
        })
    }

    /// Loads a CA saved by [`CertificateAuthority::generate`].
    pub fn from_pem(cluster: &str, cert_pem: &str, key_pem: &str) -> Result<Self, ClusterError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| ClusterError::Ca(e.to_string()))?;
        Ok(Self {
            cluster: cluster.to_owned(),
            key,
            cert_pem: cert_pem.to_owned(),
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM. Keep it off the orchestrators if you can.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a certificate for orchestrator `node`, valid as server and client, naming `node`
    /// itself (so a peer can check who it talks to) and the host names and IP addresses in
    /// `hosts` (plus `localhost` and 127.0.0.1).
    pub fn issue(&self, node: &str, hosts: &[String]) -> Result<NodeTls, ClusterError> {
        let mut names: Vec<String> = vec![node.to_owned()];
        for extra in hosts
            .iter()
            .map(String::as_str)
            .chain(["localhost", "127.0.0.1"])
        {
            if !names.iter().any(|n| n == extra) {
                names.push(extra.to_owned());
            }
        }
        let mut params =
            CertificateParams::new(names).map_err(|e| ClusterError::Ca(e.to_string()))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "qfence");
        dn.push(DnType::CommonName, node);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().map_err(|e| ClusterError::Ca(e.to_string()))?;
        let issuer = Issuer::new(ca_params(&self.cluster), &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| ClusterError::Ca(e.to_string()))?;
        Ok(NodeTls {
            ca_pem: self.cert_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// What a new orchestrator needs to join: the cluster's name, who it is for, and its TLS
/// material (the cluster CA, its certificate and its private key), issued by the node that
/// holds the CA (`qfence serve --init` writes one per other orchestrator of the configuration).
///
/// It is a secret: it holds a private key. It travels as one line of text, `qfence-join-v1.`
/// then URL-safe base64 of JSON, so it fits a file, an environment variable or a secret store;
/// it never crosses the network in qfence itself (the joining node presents the certificate
/// it carries on the cluster's mutual TLS, exactly as with `qfence cluster issue` + `join`).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct JoinToken {
    pub cluster: String,
    /// The orchestrator it was issued for: only that one may use it.
    pub name: String,
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinToken")
            .field("cluster", &self.cluster)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

const JOIN_TOKEN_PREFIX: &str = "qfence-join-v1.";

impl JoinToken {
    /// Issues a token for orchestrator `name`, its certificate naming `hosts` too.
    pub fn issue(
        ca: &CertificateAuthority,
        name: &str,
        hosts: &[String],
    ) -> Result<Self, ClusterError> {
        let tls = ca.issue(name, hosts)?;
        Ok(Self {
            cluster: ca.cluster.clone(),
            name: name.to_owned(),
            ca_pem: tls.ca_pem,
            cert_pem: tls.cert_pem,
            key_pem: tls.key_pem,
        })
    }

    /// The one-line form.
    pub fn encode(&self) -> String {
        use base64::Engine as _;
        let json = serde_json::to_vec(self).expect("a join token serialises");
        format!(
            "{JOIN_TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
        )
    }

    /// Reads the one-line form (surrounding white space ignored).
    pub fn decode(text: &str) -> Result<Self, ClusterError> {
        use base64::Engine as _;
        let bad = |why: String| ClusterError::Tls(format!("not a qfence join token: {why}"));
        let body = text
            .trim()
            .strip_prefix(JOIN_TOKEN_PREFIX)
            .ok_or_else(|| bad(format!("it does not start with {JOIN_TOKEN_PREFIX:?}")))?;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|e| bad(e.to_string()))?;
        serde_json::from_slice(&json).map_err(|e| bad(e.to_string()))
    }

    /// The TLS material it carries.
    pub fn tls(&self) -> NodeTls {
        NodeTls {
            ca_pem: self.ca_pem.clone(),
            cert_pem: self.cert_pem.clone(),
            key_pem: self.key_pem.clone(),
        }
    }
}

/// One orchestrator's TLS material: the cluster CA, its certificate and its private key.
#[derive(Clone)]
pub struct NodeTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls").finish_non_exhaustive()
    }
}

/// File names inside a node's TLS directory.
pub const CA_FILE: &str = "ca.pem";
pub const CERT_FILE: &str = "node.pem";
pub const KEY_FILE: &str = "node.key";

impl NodeTls {
    /// Writes `ca.pem`, `node.pem` and `node.key` (mode 0600 on Unix) into `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), ClusterError> {
        std::fs::create_dir_all(dir).map_err(|source| ClusterError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        write_file(&dir.join(CA_FILE), &self.ca_pem, false)?;
        write_file(&dir.join(CERT_FILE), &self.cert_pem, false)?;
        write_file(&dir.join(KEY_FILE), &self.key_pem, true)?;
        Ok(())
    }

    /// Reads what [`NodeTls::save`] wrote.
    pub fn load(dir: &Path) -> Result<Self, ClusterError> {
        Ok(Self {
            ca_pem: read_file(&dir.join(CA_FILE))?,
            cert_pem: read_file(&dir.join(CERT_FILE))?,
            key_pem: read_file(&dir.join(KEY_FILE))?,
        })
    }

    fn roots(&self) -> Result<RootCertStore, ClusterError> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(cert.map_err(tls_err)?).map_err(tls_err)?;
        }
        if roots.is_empty() {
            return Err(ClusterError::Tls("the CA file holds no certificate".into()));
        }
        Ok(roots)
    }

    fn chain(
        &self,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ClusterError> {
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(tls_err)?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(tls_err)?;
        Ok((certs, key))
    }

    /// The server side: present our certificate, require one from the cluster CA.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, ClusterError> {
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider())
                .build()
                .map_err(tls_err)?;
        let (certs, key) = self.chain()?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .map_err(tls_err)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// The client side: trust only the cluster CA, present our certificate.
    pub fn client_config(&self) -> Result<ClientConfig, ClusterError> {
        let (certs, key) = self.chain()?;
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(certs, key)
            .map_err(tls_err)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// An HTTPS client for talking to other orchestrators.
    pub fn http_client(&self, timeout: Duration) -> Result<reqwest::Client, ClusterError> {
        self.http_client_builder(timeout)?.build().map_err(tls_err)
    }

    /// The builder behind [`NodeTls::http_client`], for callers that add settings.
    pub fn http_client_builder(
        &self,
        timeout: Duration,
    ) -> Result<reqwest::ClientBuilder, ClusterError> {
        Ok(reqwest::Client::builder()
            .tls_backend_preconfigured(self.client_config()?)
            .https_only(true)
            .connect_timeout(timeout)
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(30)))
    }
}

fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), ClusterError> {
    let io = |source| ClusterError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::write(path, text).map_err(io)?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    Ok(())
}

fn read_file(path: &Path) -> Result<String, ClusterError> {
    std::fs::read_to_string(path).map_err(|source| ClusterError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A TCP listener that hands axum only connections that completed a mutual-TLS handshake.
/// Handshakes run in their own tasks so a slow or hostile peer cannot stall the others.
#[derive(Debug)]
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` until `shutdown` is cancelled.
    pub fn new(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        shutdown: CancellationToken,
    ) -> Result<Self, ClusterError> {
        let local = listener.local_addr().map_err(|source| ClusterError::Io {
            path: "listener".into(),
            source,
        })?;
        let (tx, rx) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    () = shutdown.cancelled() => return,
                    r = listener.accept() => match r {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(error = %e, "Accepting a connection failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::info!(%peer, error = %e, "Refused a connection: TLS handshake failed");
                        }
                        Err(_) => {
                            tracing::info!(%peer, "Refused a connection: TLS handshake timed out")
                        }
                    }
                });
            }
        });
        Ok(Self { rx, local })
    }
}

/// The other end of a connection: its address and the certificate it presented (already
/// verified against the cluster CA during the handshake).
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    cert: Option<CertificateDer<'static>>,
}

impl Peer {
    /// Whether the peer's certificate was issued for orchestrator `name`.
    pub fn is_named(&self, name: &str) -> bool {
        let Some(cert) = &self.cert else {
            return false;
        };
        let Ok(parsed) = rustls::server::ParsedCertificate::try_from(cert) else {
            return false;
        };
        let Ok(server_name) = rustls::pki_types::ServerName::try_from(name) else {
            return false;
        };
        rustls::client::verify_server_name(&parsed, &server_name).is_ok()
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        let (_, connection) = stream.io().get_ref();
        Self {
            addr: *stream.remote_addr(),
            cert: connection
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned()),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(x) => x,
            // The accept loop stopped (shutdown): serve nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_token_reads_back_and_carries_a_certificate_from_the_cluster_ca() {
        let ca = CertificateAuthority::generate("lab").unwrap();
        let token = JoinToken::issue(&ca, "dc2-a", &["10.2.0.10".into()]).unwrap();
        let line = token.encode();
        assert!(line.starts_with("qfence-join-v1."), "{line}");
        assert!(!line.contains('\n') && !line.contains(' '));
        let back = JoinToken::decode(&format!("  {line}\n")).unwrap();
        assert_eq!(
            (back.cluster.as_str(), back.name.as_str()),
            ("lab", "dc2-a")
        );
        assert_eq!(back.ca_pem, ca.cert_pem());
        // The material is usable as is: it builds the mutual-TLS configurations.
        back.tls().server_config().unwrap();
        back.tls().client_config().unwrap();
        // The key never shows in debug output.
        assert!(!format!("{back:?}").contains("PRIVATE KEY"));
        for bad in [
            "",
            "qfence-join-v1.",
            "qfence-join-v2.abc",
            "qfence-join-v1.!!!",
        ] {
            let e = JoinToken::decode(bad).unwrap_err().to_string();
            assert!(e.contains("not a qfence join token"), "{bad:?}: {e}");
        }
    }
}
