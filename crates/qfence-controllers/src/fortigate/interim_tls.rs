//! INTERIM: a minimal HTTPS client builder for the Proxmox VE and FortiGate drivers, until the
//! shared TLS module lands. At merge, replace every `crate::interim_tls::` use with the shared
//! one and delete this file. It honours `TlsTrust` minimally: system roots (webpki-roots), a CA
//! file, a SHA-256 pin of the end-entity certificate, or insecure.

use std::sync::Arc;
use std::time::Duration;

use qfence_model::config::TlsTrust;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Builds a reqwest client for `trust`. Reads the CA file, so call it lazily (not in `build`).
pub(crate) fn https_client(
    trust: &TlsTrust,
    connect_timeout: Duration,
) -> Result<reqwest::Client, String> {
    let config = rustls_config(trust)?;
    reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .tls_info(true)
        .connect_timeout(connect_timeout)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// The rustls client configuration for `trust` (ring provider). Reads the CA file.
pub(crate) fn rustls_config(trust: &TlsTrust) -> Result<rustls::ClientConfig, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let config = match trust {
        TlsTrust::SystemRoots => {
            let roots =
                rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        TlsTrust::CaFile(path) => {
            let pem =
                std::fs::read(path).map_err(|e| format!("cannot read CA file {path}: {e}"))?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| format!("CA file {path}: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("CA file {path}: {e}"))?;
            }
            if roots.is_empty() {
                return Err(format!("CA file {path} holds no certificate"));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        TlsTrust::Pin(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: Some(pin.trim_start_matches("sha256:").to_ascii_lowercase()),
                provider,
            }))
            .with_no_client_auth(),
        TlsTrust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinVerifier {
                pin: None,
                provider,
            }))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// The SHA-256 fingerprint (lower-case hex) of the certificate a response came with.
pub(crate) fn fingerprint(resp: &reqwest::Response) -> Option<String> {
    let info = resp.extensions().get::<reqwest::tls::TlsInfo>()?;
    Some(sha256_hex(info.peer_certificate()?))
}

pub(crate) fn sha256_hex(der: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, der))
}

/// Accepts exactly the pinned certificate (or any, when `pin` is `None`: insecure), still
/// checking the handshake signatures so the peer holds the certificate's key.
#[derive(Debug)]
struct PinVerifier {
    pin: Option<String>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.pin {
            None => Ok(ServerCertVerified::assertion()),
            Some(pin) if *pin == sha256_hex(end_entity) => Ok(ServerCertVerified::assertion()),
            Some(_) => Err(rustls::Error::General(
                "certificate does not match the pinned fingerprint".to_owned(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The kind of a transport error: unreachable unless the client's own timeout fired.
pub(crate) fn transport_kind(e: &reqwest::Error) -> crate::driver::ErrorKind {
    if e.is_timeout() {
        crate::driver::ErrorKind::Timeout
    } else if e.is_decode() {
        crate::driver::ErrorKind::Protocol
    } else {
        crate::driver::ErrorKind::Unreachable
    }
}

/// A transport error's message with its causes, which reqwest keeps in the source chain.
pub(crate) fn transport_message(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}
