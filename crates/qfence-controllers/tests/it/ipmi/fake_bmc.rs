//! The IPMI driver against a small in-process BMC that follows the spec where `ipmi_sim`
//! does not (complete Get Watchdog Timer answers, a user privilege limit) and can misbehave
//! on purpose (lose the answer to Chassis Control). The BMC side is built from the same
//! wire module, but from the BMC's point of view: it computes RAKP 2 and 4 and checks
//! RAKP 3, so a console that gets a step wrong cannot open a session.

use std::sync::{Arc, Mutex};

use super::support::{ctx, driver, target};
use qfence_controllers::Driver;
use qfence_controllers::driver::Build as _;
use qfence_controllers::ipmi::wire::{self, CipherSuite, Rakp, SessionKeys, cmd, netfn, payload};
use qfence_model::Grade;
use tokio::net::UdpSocket;

const GUID: [u8; 16] = *b"0123456789abcdef";
const RC: [u8; 16] = [0x5A; 16];
const PASSWORD: &[u8] = b"password";

#[derive(Default)]
struct Bmc {
    /// Cipher suite 17 instead of 3.
    suite17: bool,
    /// The highest privilege the user may have.
    max_privilege: u8,
    power_on: bool,
    /// Chassis Control answers to swallow (the command is still carried out).
    lose_control_answers: u32,
    /// Sign Get Chassis Status answers with session sequence 1 again, as a replay of an
    /// earlier answer would carry.
    replay_status: bool,
    /// Accept Chassis Control but never change power.
    stuck: bool,
    /// Close Session requests received.
    closes: u32,
    controls: u32,
    rakp: Option<(Rakp, u8)>,
    keys: Option<SessionKeys>,
    session_privilege: u8,
    seq: u32,
    wd_use: u8,
    wd_action: u8,
    wd_initial: u16,
    wd_running: bool,
    /// When the running timer expires (IPMI v2.0 §27: a Reset restarts it from the initial
    /// countdown, so each renewal postpones this).
    wd_expires: Option<std::time::Instant>,
    /// The timer expired with action power-down and powered the host off.
    wd_fired: bool,
}

fn checksum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x)).wrapping_neg()
}

impl Bmc {
    fn suite(&self) -> CipherSuite {
        if self.suite17 {
            CipherSuite::Seventeen
        } else {
            CipherSuite::Three
        }
    }

    fn answer(&mut self, bytes: &[u8]) -> Option<Vec<u8>> {
        let suite = self.suite();
        if let Ok(req) = wire::parse_sessionless(bytes) {
            // Get Channel Authentication Capabilities: IPMI 2.0, named users only, no Kg
            let mut r = vec![0x81, (netfn::APP + 1) << 2];
            r.push(checksum(&r));
            let body = [0x20, req[4], req[5], 0, 0x01, 0x80, 0x04, 0x02, 0, 0, 0, 0];
            r.extend_from_slice(&body);
            r.push(checksum(&body));
            return Some(wire::build_sessionless(&r));
        }
        let p = wire::parse_packet(bytes, suite.icv_len()).ok()?;
        let m = p.payload;
        match p.payload_type {
            payload::OPEN_SESSION_REQUEST => {
                let mut r = vec![m[0], 0, 4, 0];
                r.extend_from_slice(&m[4..8]);
                r.extend_from_slice(&0x0B0C_0D0Eu32.to_le_bytes());
                // this BMC offers one suite and refuses proposals of any other
                let proposed = [m[12], m[20], m[28]];
                if proposed != suite.algorithms() {
                    return Some(handshake(
                        payload::OPEN_SESSION_RESPONSE,
                        &[m[0], 0x11, 0, 0],
                    ));
                }
                for (i, a) in suite.algorithms().into_iter().enumerate() {
                    r.extend_from_slice(&[i as u8, 0, 0, 8, a, 0, 0, 0]);
                }
                self.rakp = Some((
                    Rakp {
                        console_sid: u32::from_le_bytes(m[4..8].try_into().ok()?),
                        bmc_sid: 0x0B0C_0D0E,
                        rm: [0; 16],
                        role: 0,
                        username: vec![],
                        suite,
                    },
                    m[0],
                ));
                Some(handshake(payload::OPEN_SESSION_RESPONSE, &r))
            }
            payload::RAKP1 => {
                let (rakp, _) = self.rakp.as_mut()?;
                rakp.rm = m[8..24].try_into().ok()?;
                rakp.role = m[24];
                let len = usize::from(m[27]);
                rakp.username = m[28..28 + len].to_vec();
                let mut r = vec![m[0]];
                if rakp.role & 0x0F > self.max_privilege {
                    r.extend_from_slice(&[0x09, 0, 0]);
                    r.extend_from_slice(&rakp.console_sid.to_le_bytes());
                    return Some(handshake(payload::RAKP2, &r));
                }
                r.extend_from_slice(&[0, 0, 0]);
                r.extend_from_slice(&rakp.console_sid.to_le_bytes());
                r.extend_from_slice(&RC);
                r.extend_from_slice(&GUID);
                r.extend_from_slice(&rakp.expected_rakp2_code(PASSWORD, &RC, &GUID));
                Some(handshake(payload::RAKP2, &r))
            }
            payload::RAKP3 => {
                let (rakp, _) = self.rakp.as_ref()?;
                let ok = rakp.message3(m[0], PASSWORD, &RC) == m;
                let mut r = vec![m[0], if ok { 0 } else { 0x0F }, 0, 0];
                r.extend_from_slice(&rakp.console_sid.to_le_bytes());
                if ok {
                    let sik = rakp.sik(PASSWORD, &RC);
                    r.extend_from_slice(&rakp.expected_rakp4_icv(&sik, &GUID));
                    self.keys = Some(SessionKeys::from_sik(suite, &sik));
                    self.session_privilege = 2;
                }
                Some(handshake(payload::RAKP4, &r))
            }
            payload::IPMI => {
                let keys = self.keys.as_ref()?;
                wire::verify(&p, keys).ok()?;
                let req = keys.decrypt(m).ok()?;
                let (nf, seq, c, data) = (req[1] >> 2, req[4], req[5], &req[6..req.len() - 1]);
                let (cc, out) = self.command(nf, c, data);
                if nf == netfn::CHASSIS
                    && c == cmd::CHASSIS_CONTROL
                    && self.lose_control_answers > 0
                {
                    self.lose_control_answers -= 1;
                    return None;
                }
                let mut r = vec![0x81, (nf + 1) << 2];
                r.push(checksum(&r));
                let body_at = r.len();
                r.extend_from_slice(&[0x20, seq, c, cc]);
                r.extend_from_slice(&out);
                r.push(checksum(&r[body_at..]));
                let keys = self.keys.as_ref()?;
                let enc = keys.encrypt(&r, [3; 16]);
                self.seq += 1;
                if self.replay_status && nf == netfn::CHASSIS && c == cmd::GET_CHASSIS_STATUS {
                    self.seq = 1;
                }
                let console_sid = self.rakp.as_ref()?.0.console_sid;
                Some(wire::build_packet(
                    payload::IPMI,
                    true,
                    console_sid,
                    self.seq,
                    &enc,
                    Some(keys),
                ))
            }
            _ => None,
        }
    }

    /// Lets the watchdog expire if its time has come (called on every command and by tests).
    fn tick(&mut self) {
        if let Some(at) = self.wd_expires
            && self.wd_running
            && std::time::Instant::now() >= at
        {
            self.wd_running = false;
            self.wd_expires = None;
            if self.wd_action & 7 == 1 || self.wd_action & 7 == 2 {
                self.power_on = false;
                self.wd_fired = true;
            }
        }
    }

    fn countdown(tenths: u16) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(tenths) * 100)
    }

    fn command(&mut self, nf: u8, c: u8, data: &[u8]) -> (u8, Vec<u8>) {
        self.tick();
        match (nf, c) {
            (netfn::APP, cmd::SET_SESSION_PRIVILEGE) => {
                if data[0] > self.max_privilege {
                    return (0x81, vec![]);
                }
                self.session_privilege = data[0];
                (0, vec![data[0]])
            }
            (netfn::APP, cmd::GET_SESSION_INFO) => {
                (0, vec![1, 0x3F, 1, 2, self.session_privilege, 0x11])
            }
            (netfn::APP, cmd::GET_SYSTEM_GUID) => (0, GUID.to_vec()),
            (netfn::APP, cmd::GET_DEVICE_ID) => (
                0,
                vec![0x20, 1, 1, 0x10, 0x02, 0xBF, 0x57, 0x01, 0, 0x34, 0x12],
            ),
            (netfn::APP, cmd::CLOSE_SESSION) => {
                self.closes += 1;
                (0, vec![])
            }
            (netfn::CHASSIS, cmd::GET_CHASSIS_STATUS) => (0, vec![u8::from(self.power_on), 0, 0]),
            (netfn::CHASSIS, cmd::CHASSIS_CONTROL) => {
                if self.session_privilege < 3 {
                    return (0xD4, vec![]);
                }
                self.controls += 1;
                if !self.stuck {
                    self.power_on = data[0] == 1;
                }
                (0, vec![])
            }
            (netfn::APP, cmd::SET_WATCHDOG) => {
                self.wd_use = data[0] & 0x07;
                self.wd_action = data[1];
                self.wd_initial = u16::from_le_bytes([data[4], data[5]]);
                if data[0] & 0x40 == 0 {
                    self.wd_running = false;
                    self.wd_expires = None;
                } else if self.wd_running {
                    // "don't stop": a running timer goes on from the new countdown
                    self.wd_expires =
                        Some(std::time::Instant::now() + Self::countdown(self.wd_initial));
                }
                (0, vec![])
            }
            (netfn::APP, cmd::RESET_WATCHDOG) => {
                if self.wd_initial == 0 {
                    return (0x80, vec![]);
                }
                // §27.5: (re)starts the timer from the initial countdown, whatever the action
                self.wd_running = true;
                self.wd_expires =
                    Some(std::time::Instant::now() + Self::countdown(self.wd_initial));
                (0, vec![])
            }
            (netfn::APP, cmd::GET_WATCHDOG) => {
                let i = self.wd_initial.to_le_bytes();
                let running = if self.wd_running { 0x40 } else { 0 };
                // the present countdown: what is left while running
                let present = match (self.wd_running, self.wd_expires) {
                    (true, Some(at)) => u16::try_from(
                        at.saturating_duration_since(std::time::Instant::now())
                            .as_millis()
                            / 100,
                    )
                    .unwrap_or(u16::MAX),
                    _ => self.wd_initial,
                };
                let pr = present.to_le_bytes();
                (
                    0,
                    vec![
                        self.wd_use | running,
                        self.wd_action,
                        0,
                        0,
                        i[0],
                        i[1],
                        pr[0],
                        pr[1],
                    ],
                )
            }
            _ => (0xC1, vec![]),
        }
    }
}

fn handshake(kind: u8, m: &[u8]) -> Vec<u8> {
    wire::build_packet(kind, false, 0, 0, m, None)
}

async fn start(bmc: Bmc) -> (String, Arc<Mutex<Bmc>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    let state = Arc::new(Mutex::new(bmc));
    let shared = state.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            let reply = shared.lock().unwrap().answer(&buf[..n]);
            if let Some(reply) = reply {
                let _ = sock.send_to(&reply, from).await;
            }
        }
    });
    (addr, state)
}

#[tokio::test]
async fn an_operator_account_gets_an_operator_session_and_power_control_is_proven() {
    let (endpoint, _bmc) = start(Bmc {
        max_privilege: 3,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    let probe = driver(&endpoint, "password")
        .probe(&ctx(10))
        .await
        .expect("probe");
    assert_eq!(probe.identity.facts["privilege"], "OPERATOR");
    assert_eq!(probe.identity.facts["manufacturer_id"], "343"); // 0x000157
    let power = &probe.grades[0];
    assert_eq!(
        (power.capability.as_str(), power.grade),
        ("power.off", Grade::Proven),
        "{}",
        power.reason
    );
    let wd = &probe.grades[1];
    assert_eq!(wd.grade, Grade::Inferred, "{}", wd.reason);
    assert!(probe.warnings.is_empty(), "{:?}", probe.warnings);
}

#[tokio::test]
async fn a_lost_chassis_control_answer_is_resolved_by_reading_power_again() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        lose_control_answers: 2,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password").with_retry(std::time::Duration::from_millis(150), 2);
    let r = d
        .perform(&ctx(10), &target("power.off", &[]))
        .await
        .expect("fenced");
    assert!(r.holds, "{}", r.detail);
    // power was read again after the lost answers, not assumed from the command
    assert!(!r.detail.starts_with("already"), "{}", r.detail);
    let b = bmc.lock().unwrap();
    assert!(!b.power_on);
    assert_eq!(
        b.controls, 2,
        "both tries reached the BMC; neither answer came back"
    );
}

#[tokio::test]
async fn a_complete_watchdog_answer_makes_check_arm_and_disarm_provable() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let wd = target("watchdog", &[("timeout_seconds", "30")]);

    let e = d.renew(&ctx(5), &wd).await.unwrap_err();
    assert!(e.message.contains("0x80"), "{e}");

    let r = d.perform(&ctx(5), &wd).await.expect("arm");
    assert!(
        r.holds && r.detail.contains("timer running"),
        "{}",
        r.detail
    );
    assert_eq!(bmc.lock().unwrap().wd_initial, 300);
    let r = d
        .check(&ctx(5), &wd)
        .await
        .expect("check reads the running bit");
    assert!(r.holds, "{}", r.detail);
    assert!(r.detail.contains("present countdown 29."), "{}", r.detail);
    assert!(d.renew(&ctx(5), &wd).await.expect("renew").holds);

    let r = d.undo(&ctx(5), &wd).await.expect("disarm");
    assert!(!r.holds, "{}", r.detail);
    assert!(!bmc.lock().unwrap().wd_running);
    assert!(!d.check(&ctx(5), &wd).await.unwrap().holds);
}

#[tokio::test]
async fn cipher_suite_17_opens_sessions_and_fences() {
    use qfence_controllers::ipmi::IpmiDriver;
    use qfence_model::config::ControllerKind;

    let (endpoint, bmc) = start(Bmc {
        suite17: true,
        max_privilege: 4,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    // suite 3 is refused by this BMC: no cipher suite match
    let e = driver(&endpoint, "password")
        .probe(&ctx(5))
        .await
        .unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Unsupported, "{e}");

    let mut config = super::support::config(&endpoint, "admin");
    config.kind = ControllerKind::Ipmi {
        endpoint: endpoint.clone(),
        username: "admin".into(),
        cipher_suite: 17,
    };
    let d = IpmiDriver::build(
        qfence_model::ControllerId::new("bmc-17").unwrap(),
        &config,
        Some(secrecy::SecretString::from("password".to_owned())),
    )
    .unwrap();
    let probe = d.probe(&ctx(5)).await.expect("probe over suite 17");
    assert_eq!(probe.identity.facts["cipher_suite"], "17");
    let r = d
        .perform(&ctx(5), &target("power.off", &[]))
        .await
        .expect("fence");
    assert!(r.holds, "{}", r.detail);
    assert!(!bmc.lock().unwrap().power_on);

    // the wrong password is caught in RAKP 2 with SHA-256 too
    let bad = IpmiDriver::build(
        qfence_model::ControllerId::new("bmc-17").unwrap(),
        &config,
        Some(secrecy::SecretString::from("nope".to_owned())),
    )
    .unwrap();
    let e = bad.probe(&ctx(5)).await.unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Auth, "{e}");
}

#[tokio::test]
async fn an_answer_repeating_an_earlier_session_sequence_is_never_taken() {
    let (endpoint, _bmc) = start(Bmc {
        max_privilege: 4,
        power_on: false,
        replay_status: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password").with_retry(std::time::Duration::from_millis(100), 2);
    // a correctly signed "power off" that repeats sequence 1 must not count as a read-back
    let e = d
        .check(&ctx(5), &target("power.off", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Protocol, "{e}");
    assert!(e.message.contains("repeats an earlier one"), "{e}");
    assert_eq!(
        qfence_controllers::driver::fence_verdict(&Err(e)),
        qfence_model::Verdict::Unknown
    );
}

#[tokio::test]
async fn an_accepted_power_down_that_never_shows_is_a_timeout_naming_the_last_read() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        stuck: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let t = std::time::Instant::now();
    let e = d
        .perform(&ctx(2), &target("power.off", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Timeout, "{e}");
    assert!(e.state_unknown);
    assert!(e.message.contains("did not read off"), "{e}");
    assert!(e.message.contains("Chassis power on"), "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_millis(2100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(bmc.lock().unwrap().controls, 1);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(bmc.lock().unwrap().closes, 1, "the session was not closed");
}

#[tokio::test]
async fn a_call_cancelled_mid_session_still_closes_its_session() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        stuck: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let c = ctx(30);
    let token = c.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        token.cancel();
    });
    let e = d.perform(&c, &target("power.off", &[])).await.unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Cancelled, "{e}");
    assert!(e.state_unknown);
    // the command was sent: polling was under way when the call was dropped
    assert_eq!(bmc.lock().unwrap().controls, 1);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        bmc.lock().unwrap().closes,
        1,
        "Drop did not close the session"
    );
}

#[tokio::test]
async fn renewals_postpone_the_expiry_and_without_them_the_watchdog_powers_the_host_off() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let wd = target("watchdog", &[("timeout_seconds", "1")]);

    eprintln!("phase: arm a 1 s countdown, renew every 300 ms for 3 s");
    assert!(d.perform(&ctx(5), &wd).await.expect("arm").holds);
    let armed = std::time::Instant::now();
    while armed.elapsed() < std::time::Duration::from_secs(3) {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let r = d.renew(&ctx(5), &wd).await.expect("renew");
        assert!(r.holds, "{}", r.detail);
        assert!(bmc.lock().unwrap().power_on, "powered off while renewed");
    }
    eprintln!("phase: renewals stop; the BMC powers the host off a countdown later");
    let stopped = std::time::Instant::now();
    let off_after = loop {
        {
            let mut b = bmc.lock().unwrap();
            b.tick();
            if !b.power_on {
                assert!(b.wd_fired);
                break stopped.elapsed();
            }
        }
        assert!(stopped.elapsed() < std::time::Duration::from_secs(3));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    eprintln!("powered off {off_after:?} after the last renewal");
    assert!(
        off_after >= std::time::Duration::from_millis(800),
        "{off_after:?}"
    );
    let r = d.check(&ctx(5), &wd).await.expect("reads");
    assert!(!r.holds, "an expired timer no longer runs: {}", r.detail);
}

#[tokio::test]
async fn a_countdown_someone_else_set_reads_not_held_in_check_and_renew() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let wd = target("watchdog", &[("timeout_seconds", "30")]);
    assert!(d.perform(&ctx(5), &wd).await.expect("arm").holds);

    // someone sets a 60 s countdown with "don't stop": the timer keeps running, longer
    bmc.lock().unwrap().wd_initial = 600;
    let r = d.check(&ctx(5), &wd).await.expect("reads");
    assert!(!r.holds, "{}", r.detail);
    assert!(
        r.detail
            .contains("the countdown is 60.0 s, not the 30.0 s qfence sets"),
        "{}",
        r.detail
    );
    let r = d.renew(&ctx(5), &wd).await.expect("the reset is accepted");
    assert!(
        !r.holds,
        "a renewal reads the wrong countdown back: {}",
        r.detail
    );
    // arming again puts qfence's countdown back
    assert!(d.perform(&ctx(5), &wd).await.expect("re-arm").holds);
    assert!(d.check(&ctx(5), &wd).await.expect("reads").holds);
}

#[tokio::test]
async fn a_watchdog_disarmed_or_reset_behind_qfences_back_does_not_renew_as_armed() {
    let (endpoint, bmc) = start(Bmc {
        max_privilege: 4,
        power_on: true,
        ..Bmc::default()
    })
    .await;
    let d = driver(&endpoint, "password");
    let wd = target("watchdog", &[("timeout_seconds", "30")]);
    assert!(d.perform(&ctx(5), &wd).await.expect("arm").holds);

    eprintln!("phase: `ipmitool mc watchdog off`: action none, timer stopped");
    {
        let mut b = bmc.lock().unwrap();
        b.wd_action = 0;
        b.wd_running = false;
    }
    let r = d.renew(&ctx(5), &wd).await.expect("a reset is accepted");
    assert!(!r.holds, "{}", r.detail);
    assert!(r.detail.contains("action none"), "{}", r.detail);
    assert!(!d.check(&ctx(5), &wd).await.expect("reads").holds);

    eprintln!("phase: a BMC cold reset forgets the timer: renewing is refused clearly");
    {
        let mut b = bmc.lock().unwrap();
        b.wd_initial = 0;
        b.wd_expires = None;
    }
    let e = d.renew(&ctx(5), &wd).await.unwrap_err();
    assert_eq!(e.kind, qfence_controllers::ErrorKind::Rejected, "{e}");
    assert!(!e.state_unknown);
    assert!(e.message.contains("never set"), "{e}");
    assert!(d.perform(&ctx(5), &wd).await.expect("re-arm").holds);
}
