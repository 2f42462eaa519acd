//! Secret values never reach a log line, at any level: every module logs at TRACE (qfence's,
//! reqwest's, hyper's, rustls' through `log`) into a buffer while drivers authenticate with
//! basic auth, with sessions and through a fence agent's stdin, succeed and fail; then the
//! buffer is searched for the secret, its base64 form and the session token.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use qfence_controllers::fence_agent::FenceAgentDriver;
use qfence_controllers::redfish::RedfishDriver;
use qfence_controllers::{Driver, Secret};
use qfence_model::config::{RedfishAuth, TlsTrust};
use qfence_model::{ControllerId, FenceLevel};

use crate::compliance::{ctx, target};
use crate::faults::{Fault, serve};

const SECRET: &str = "Zq9-very-secret-VALUE-77";

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn secrets_never_appear_in_logs_at_trace_level() {
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
        .with_writer(move || writer.clone())
        .with_ansi(false);
    // Global, with the `log` bridge, so rustls' records and other threads are caught too.
    subscriber
        .try_init()
        .expect("first subscriber in this process");
    tracing::trace!("trace logging is on");

    // Redfish: sessions (the password in a POST body) and basic auth (in a header), a
    // success and a failure each.
    for fault in [Fault::None, Fault::InvalidJson] {
        let s = serve(fault).await;
        for auth in [RedfishAuth::Session, RedfishAuth::Basic] {
            let d = RedfishDriver::new(
                ControllerId::new("bmc-log").unwrap(),
                &s.url,
                "admin",
                auth,
                &TlsTrust::Pin(s.pin.clone()),
                Some(Secret::new(SECRET.into())),
            )
            .unwrap();
            let _ = d.probe(&ctx(Duration::from_secs(5))).await;
            let r = d
                .perform(&ctx(Duration::from_secs(5)), &target("power.off", "1"))
                .await;
            tracing::debug!(result = ?r, driver = ?d, "Result");
        }
    }

    // A fence agent that echoes its stdin (password included) to stderr and fails.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fence_echo");
    std::fs::write(&p, "#!/bin/sh\ncat >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = FenceAgentDriver::new(
        ControllerId::new("agent-log").unwrap(),
        "fence_echo",
        &BTreeMap::new(),
        FenceLevel::Compute,
        Some(Secret::new(SECRET.into())),
    )
    .unwrap()
    .with_search_path(vec![dir.path().into()]);
    let r = d
        .check(&ctx(Duration::from_secs(5)), &target("power.off", "x"))
        .await;
    let e = r.expect_err("the echo agent fails");
    assert!(
        e.message.contains("[redacted]"),
        "the agent's echo was redacted: {e}"
    );
    tracing::error!(error = %e, driver = ?d, "Fence agent failed");

    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.len() > 10_000,
        "trace logging produced too little to mean anything: {} bytes",
        logs.len()
    );
    assert!(logs.contains("bmc-log") && logs.contains("agent-log"));
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("admin:{SECRET}"));
    for needle in [SECRET, b64.as_str(), "token-1", "token-2"] {
        assert!(!logs.contains(needle), "{needle:?} appears in the logs");
    }
}
