//! TLS trust for controllers: the system roots, a CA file, or one pinned certificate.
//!
//! Every controller gets its own rustls configuration (ring provider, never aws-lc) with one
//! verifier, [`Verifier`], that always records the SHA-256 fingerprint of the certificate the
//! server showed, *before* deciding whether to trust it. That is what lets the first
//! connectivity test of a target that is going to be pinned show the fingerprint to compare
//! and pin, even when the handshake then fails against the system roots, and lets a pinned
//! target whose certificate changed be refused with both fingerprints in the error.
//!
//! Signatures are always checked against the certificate's key, pinned or insecure: the
//! server must prove it holds the key of the certificate it showed.
//!
//! Fingerprints are written `sha256:` + 64 lower-case hex digits; a pin may be written with
//! or without the prefix, in either case, with or without colons.

use std::sync::{Arc, Mutex};

use qfence_model::config::TlsTrust;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::Error;

/// The fingerprint of a DER certificate: `sha256:` + lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    format!("sha256:{}", hex::encode(digest.as_ref()))
}

/// Normalises a written pin to `sha256:HEX`, or says why it is not one.
pub fn parse_pin(pin: &str) -> Result<String, String> {
    let lower = pin.trim().to_ascii_lowercase();
    let hexpart: String = lower
        .strip_prefix("sha256:")
        .unwrap_or(&lower)
        .chars()
        .filter(|c| *c != ':')
        .collect();
    if hexpart.len() != 64 || !hexpart.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "pin {pin:?} is not a SHA-256 fingerprint (sha256: and 64 hex digits)"
        ));
    }
    Ok(format!("sha256:{hexpart}"))
}

/// The fingerprint of the certificate last shown by the server, shared between the verifier
/// and the driver that reports it.
#[derive(Debug, Clone, Default)]
pub struct SeenCert(Arc<Mutex<Option<String>>>);

impl SeenCert {
    /// The last fingerprint seen, if any handshake got that far.
    pub fn get(&self) -> Option<String> {
        self.0.lock().map(|g| g.clone()).unwrap_or(None)
    }

    fn set(&self, fp: String) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some(fp);
        }
    }
}

enum Mode {
    Roots(Arc<WebPkiServerVerifier>),
    Pin(String),
    Insecure,
}

/// The one verifier qfence uses for controllers: records, then pins, verifies or (in labs)
/// accepts.
pub struct Verifier {
    mode: Mode,
    seen: SeenCert,
    provider: Arc<CryptoProvider>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match &self.mode {
            Mode::Roots(_) => "roots".to_owned(),
            Mode::Pin(p) => format!("pin {p}"),
            Mode::Insecure => "insecure".to_owned(),
        };
        f.debug_struct("Verifier").field("mode", &mode).finish()
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        self.seen.set(fp.clone());
        match &self.mode {
            Mode::Pin(pin) if *pin == fp => Ok(ServerCertVerified::assertion()),
            Mode::Pin(pin) => Err(rustls::Error::General(format!(
                "the server's certificate changed: it shows {fp}, the pin is {pin}; \
                 refusing it (re-pin only after checking the new certificate)"
            ))),
            Mode::Insecure => Ok(ServerCertVerified::assertion()),
            Mode::Roots(inner) => inner
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                .map_err(|e| {
                    rustls::Error::General(format!(
                        "certificate not trusted ({e}); it shows {fp}, which can be pinned \
                         with tls: {{pin: \"{fp}\"}} after checking it"
                    ))
                }),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A controller's TLS client setup.
#[derive(Debug)]
pub struct TlsSetup {
    /// The rustls configuration to hand to the HTTP client.
    pub config: rustls::ClientConfig,
    /// Where the verifier records the certificate it was shown.
    pub seen: SeenCert,
    /// A warning to show wherever this controller is used (`insecure: true`).
    pub warning: Option<String>,
}

/// The warning shown for `insecure: true`.
pub fn insecure_warning(controller: &str) -> String {
    format!(
        "controller {controller}: TLS certificate checking is OFF (tls: insecure: true); \
         anyone on the path can impersonate it. Pin its certificate instead."
    )
}

/// System trust anchors: the distribution bundle when there is one (`SSL_CERT_FILE`, then
/// Debian's and Red Hat's paths), else the Mozilla roots compiled in.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let candidates = std::env::var("SSL_CERT_FILE").ok().into_iter().chain([
        "/etc/ssl/certs/ca-certificates.crt".to_owned(),
        "/etc/pki/tls/certs/ca-bundle.crt".to_owned(),
    ]);
    for path in candidates {
        if let Ok(certs) = read_pem_certs(&path)
            && !certs.is_empty()
        {
            roots.add_parsable_certificates(certs);
            if !roots.is_empty() {
                return roots;
            }
        }
    }
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

fn read_pem_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    rustls_pemfile::certs(&mut data.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{path} is not PEM: {e}"))
}

/// Builds the TLS setup for a controller. Reads the CA file when one is named; opens no
/// connection.
pub fn client_config(controller: &str, trust: &TlsTrust) -> Result<TlsSetup, Error> {
    let err = |reason: String| Error::Tls {
        controller: controller.to_owned(),
        reason,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut warning = None;
    let mode = match trust {
        TlsTrust::SystemRoots => Mode::Roots(
            WebPkiServerVerifier::builder_with_provider(Arc::new(system_roots()), provider.clone())
                .build()
                .map_err(|e| err(format!("system roots: {e}")))?,
        ),
        TlsTrust::CaFile(path) => {
            let certs = read_pem_certs(path).map_err(err)?;
            if certs.is_empty() {
                return Err(err(format!("{path} holds no certificate")));
            }
            let mut roots = RootCertStore::empty();
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| err(format!("{path}: unusable CA certificate: {e}")))?;
            }
            Mode::Roots(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| err(format!("{path}: {e}")))?,
            )
        }
        TlsTrust::Pin(pin) => Mode::Pin(parse_pin(pin).map_err(err)?),
        TlsTrust::Insecure => {
            let w = insecure_warning(controller);
            tracing::warn!(
                controller,
                "TLS certificate checking is off for this controller"
            );
            warning = Some(w);
            Mode::Insecure
        }
    };
    let seen = SeenCert::default();
    let verifier = Arc::new(Verifier {
        mode,
        seen: seen.clone(),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(TlsSetup {
        config,
        seen,
        warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalised_and_checked() {
        let hex64 = "AB".repeat(32);
        let want = format!("sha256:{}", "ab".repeat(32));
        assert_eq!(parse_pin(&hex64).unwrap(), want);
        assert_eq!(parse_pin(&format!("SHA256:{hex64}")).unwrap(), want);
        let colons: Vec<String> = (0..32).map(|_| "ab".to_owned()).collect();
        assert_eq!(parse_pin(&colons.join(":")).unwrap(), want);
        assert!(parse_pin("sha256:abc").is_err());
        assert!(parse_pin(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn fingerprint_is_sha256_of_the_der() {
        // SHA-256 of the empty string.
        assert_eq!(
            fingerprint(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_ca_file_that_is_missing_or_empty_is_refused_at_build() {
        let e = client_config("bmc", &TlsTrust::CaFile("/nonexistent/ca.pem".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bmc") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
        let f = tempfile::NamedTempFile::new().unwrap();
        let p = f.path().display().to_string();
        let e = client_config("bmc", &TlsTrust::CaFile(p.clone()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds no certificate"), "{e}");
    }

    #[test]
    fn insecure_is_warned_about() {
        let s = client_config("bmc", &TlsTrust::Insecure).unwrap();
        assert!(s.warning.unwrap().contains("insecure: true"));
        assert!(
            client_config("bmc", &TlsTrust::SystemRoots)
                .unwrap()
                .warning
                .is_none()
        );
    }
}
