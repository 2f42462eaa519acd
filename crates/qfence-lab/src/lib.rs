//! qfence-lab: simulators that speak the real protocols, for the demo lab and for fault tests.
//!
//! Each simulator is an HTTPS server modelled on the public API documents of the system it
//! stands for, so that qfence's real drivers work against it unchanged. Every simulator has
//! the same shape: `start(bind address, TLS identity, initial state) -> Handle`, and the
//! handle exposes the bound address, the certificate's SHA-256 fingerprint (for pinning),
//! the live state (snapshot and update, for tests and for `qfence lab fail|heal`), the
//! fault switches, and a graceful shutdown.
//!
//! - [`fortios`]: a FortiGate (FortiOS REST API): policies, VIPs, VDOMs, revisions, HA sync.
//! - [`redfish`]: a BMC (Redfish): systems, power with a realistic delay, sessions, roles.
//! - [`proxmox`]: a Proxmox VE cluster API: nodes, VMs, UPID tasks, replication, ACLs.
//! - [`faults`]: the protocol-independent faults (unreachable, wrong certificate, latency,
//!   5xx storms) every simulator shares.
//! - [`tls`]: self-signed identities and the server loop.
//! - [`lab`]: `qfence lab`, the whole demo lab (two datacenters and a witness, their
//!   simulators and orchestrators) on loopback in one process.
//!
//! A BMC's host power is wired to a Proxmox node with [`redfish::BmcHandle::power_line`]
//! and [`proxmox::PveHandle::attach_power`]: powering the host off takes the node offline.
//! Endpoints, state and faults are documented in `docs/specs/lab-simulators.md`.

// The simulators play real devices, which keep their own clocks (a BMC's uptime, Keystone's
// token expiry, a Proxmox node's replication times): they read the system clocks directly,
// as the devices do, rather than qfence's injected time.
#![allow(clippy::disallowed_methods)]

pub mod faults;
pub mod fortios;
pub mod lab;
pub mod nova;
pub mod proxmox;
pub mod redfish;
pub mod tls;

pub use tls::{LabError, TlsIdentity};

use std::sync::Arc;

/// A TLS server identity for a simulator: a self-signed certificate and its server config.
#[derive(Clone)]
pub struct LabTls {
    /// The certificate, DER-encoded (hash it to pin it).
    pub cert_der: Vec<u8>,
    /// The certificate, PEM-encoded (write it to a file to trust it as a CA).
    pub cert_pem: String,
    /// The rustls server configuration using it.
    pub server_config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for LabTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabTls")
            .field("cert_der_len", &self.cert_der.len())
            .finish_non_exhaustive()
    }
}

impl LabTls {
    /// A fresh self-signed certificate for `names` (DNS names or IP addresses).
    pub fn self_signed(names: &[&str]) -> Result<Self, LabError> {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let ck =
            rcgen::generate_simple_self_signed(names).map_err(|e| LabError::Tls(e.to_string()))?;
        let cert_der = ck.cert.der().to_vec();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| LabError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![cert_der.clone().into()], key)
            .map_err(|e| LabError::Tls(e.to_string()))?;
        Ok(Self {
            cert_der,
            cert_pem: ck.cert.pem(),
            server_config: Arc::new(server_config),
        })
    }
}
