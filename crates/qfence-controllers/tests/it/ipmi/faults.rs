//! The IPMI driver against BMCs that misbehave: silent, absent, answering junk or refusing
//! the cipher suite. No emulator needed: each test binds its own UDP socket on loopback.

use std::time::{Duration, Instant};

use super::support::{ctx, driver, target};
use qfence_controllers::driver::Build as _;
use qfence_controllers::ipmi::wire;
use qfence_controllers::{Driver, ErrorKind};
use tokio::net::UdpSocket;

/// A UDP "BMC" on loopback that answers each datagram with what `answer` returns.
async fn fake_bmc(answer: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + 'static) -> String {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            if let Some(reply) = answer(&buf[..n]) {
                let _ = sock.send_to(&reply, from).await;
            }
        }
    });
    addr.to_string()
}

#[tokio::test]
async fn a_silent_bmc_ends_at_the_deadline_with_the_state_unknown() {
    let endpoint = fake_bmc(|_| None).await;
    let d = driver(&endpoint, "password");
    let t = Instant::now();
    let e = d
        .perform(&ctx_ms(700), &target("power.off", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.state_unknown);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

fn ctx_ms(ms: u64) -> qfence_controllers::CallContext {
    qfence_controllers::CallContext::with_timeout(
        qfence_model::OrchestratorId::new("orch-1").unwrap(),
        Duration::from_millis(ms),
    )
}

#[tokio::test]
async fn cancellation_ends_a_call_at_once() {
    let endpoint = fake_bmc(|_| None).await;
    let d = driver(&endpoint, "password");
    let c = ctx(30);
    let token = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    let t = Instant::now();
    let e = d.renew(&c, &target("watchdog", &[])).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled, "{e}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[tokio::test]
async fn nothing_listening_is_unreachable_and_changes_nothing() {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let d = driver(&format!("127.0.0.1:{port}"), "password");
    let t = Instant::now();
    let e = d
        .perform(&ctx(10), &target("power.off", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(!e.state_unknown, "nothing was sent to a BMC: {e}");
    assert!(e.message.contains("refused"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[tokio::test]
async fn junk_answers_are_a_protocol_error_not_a_panic() {
    let endpoint = fake_bmc(|_| {
        Some(vec![
            0x06, 0x00, 0xFF, 0x07, 0x06, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 1, 2,
        ])
    })
    .await;
    let d = driver(&endpoint, "password").with_retry(Duration::from_millis(100), 2);
    let e = d.probe(&ctx(10)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
    assert!(e.message.contains("not RMCP+"), "{e}");
}

/// Answers an Open Session Request with `status` (and, if 0, algorithms `algs`).
fn open_session_answer(request: &[u8], status: u8, algs: [u8; 3]) -> Option<Vec<u8>> {
    let p = wire::parse_packet(request, 12).ok()?;
    if p.payload_type != wire::payload::OPEN_SESSION_REQUEST {
        return None;
    }
    let tag = p.payload[0];
    let mut m = vec![tag, status, 4, 0];
    m.extend_from_slice(&p.payload[4..8]);
    m.extend_from_slice(&0x1234_5678u32.to_le_bytes());
    for (i, a) in algs.iter().enumerate() {
        m.extend_from_slice(&[i as u8, 0, 0, 8, *a, 0, 0, 0]);
    }
    Some(wire::build_packet(
        wire::payload::OPEN_SESSION_RESPONSE,
        false,
        0,
        0,
        &m,
        None,
    ))
}

#[tokio::test]
async fn a_bmc_without_cipher_suite_3_is_unsupported() {
    let power = target("power.off", &[]);
    let endpoint = fake_bmc(|req| open_session_answer(req, 0x11, [0; 3])).await;
    let e = driver(&endpoint, "password")
        .check(&ctx(10), &power)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("no cipher suite match"), "{e}");

    // A BMC that picks other algorithms than proposed is refused too.
    let endpoint = fake_bmc(|req| open_session_answer(req, 0, [0x01, 0x00, 0x00])).await;
    let e = driver(&endpoint, "password")
        .check(&ctx(10), &power)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("not cipher suite 3"), "{e}");
}

#[tokio::test]
async fn bindings_are_checked_without_touching_the_bmc_for_power_off() {
    // nothing listens: a power.off binding check needs no I/O
    let d = driver("127.0.0.1:9", "password");
    let ok = d
        .check_binding(&ctx(5), &target("power.off", &[]))
        .await
        .unwrap();
    assert!(ok.is_empty(), "{ok:?}");
    let problems = d
        .check_binding(&ctx(5), &target("power.off", &[("delay", "3")]))
        .await
        .unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problems = d
        .check_binding(&ctx(5), &target("vm.stop", &[]))
        .await
        .unwrap();
    assert!(
        problems[0].contains("not an IPMI capability"),
        "{problems:?}"
    );
    let e = d
        .perform(&ctx(5), &target("watchdog", &[("timeout_seconds", "0")]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.message.contains("timeout_seconds"), "{e}");
}

#[test]
fn build_refuses_other_cipher_suites_and_urls() {
    use qfence_controllers::ipmi::IpmiDriver;
    use qfence_model::ControllerId;
    use qfence_model::config::ControllerKind;
    use secrecy::SecretString;

    let mut config = super::support::config("127.0.0.1:623", "admin");
    config.kind = ControllerKind::Ipmi {
        endpoint: "127.0.0.1".into(),
        username: "admin".into(),
        cipher_suite: 1,
    };
    let e = IpmiDriver::build(
        ControllerId::new("bmc").unwrap(),
        &config,
        Some(SecretString::from("x".to_owned())),
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.message.contains("cipher suite 1 is not supported"), "{e}");

    let config = super::support::config("https://bmc1", "admin");
    let e = IpmiDriver::build(
        ControllerId::new("bmc").unwrap(),
        &config,
        Some(SecretString::from("x".to_owned())),
    )
    .unwrap_err();
    assert!(e.message.contains("URL"), "{e}");
}
