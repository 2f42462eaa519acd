//! The PostgreSQL driver against a real PostgreSQL 15 primary and streaming replica, started
//! per test by `tools/emulators/start-pg-pair.sh` in a run dir and on ports of the test's own,
//! and stopped by `stop.sh` when the test ends.
//!
//! Without the emulator scripts or PostgreSQL these tests fail with a message saying so, unless
//! `QFENCE_SKIP_EMULATORS=1`.

use std::path::PathBuf;
use std::time::Duration;

use crate::emulators::{Emulator, Starter, free_port};

use qfence_controllers::driver::Build as _;
use qfence_controllers::postgres::{self, PostgresDriver};
use qfence_controllers::{CallContext, Driver, ErrorKind, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId, Verdict};
use secrecy::SecretString;

/// A primary and a streaming replica; stopped when dropped.
pub(crate) struct Pair {
    /// The CA of the servers' certificate, with `PG_SSL=1`.
    cacert: PathBuf,
    pub(crate) emu: Emulator,
    pub(crate) primary: u16,
    pub(crate) replica: u16,
}

impl Pair {
    pub(crate) fn start() -> Option<Pair> {
        Self::start_with(&[])
    }

    /// Starts a pair with extra settings of the start script (`PG_SSL=1`).
    fn start_with(env: &[(&str, &str)]) -> Option<Pair> {
        // A short run dir ("qpg"): the Unix socket path must stay under 108 bytes.
        let mut starter = Starter::new("start-pg-pair.sh")
            .prefix("qpg")
            .tcp_port("PG_PRIMARY_PORT")
            .tcp_port("PG_REPLICA_PORT");
        for (k, v) in env {
            starter = starter.env(*k, *v);
        }
        let emu = starter.start()?;
        Some(Pair {
            cacert: emu.run_dir().join("pg/tls/ca.pem"),
            primary: emu.port("PG_PRIMARY_PORT"),
            replica: emu.port("PG_REPLICA_PORT"),
            emu,
        })
    }

    fn url(port: u16) -> String {
        format!("host=127.0.0.1 port={port} user=postgres password=postgres dbname=app")
    }

    pub(crate) async fn client(port: u16) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, conn) =
            tokio_postgres::connect(&Self::url(port), tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(client)
    }

    async fn sql(port: u16, sql: &str) {
        Self::client(port)
            .await
            .unwrap()
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

fn driver_as(port: u16, user: &str, password: &str) -> PostgresDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::SystemRoots,
        timeout: Duration::from_secs(5),
        kind: ControllerKind::Postgres {
            endpoint: format!("postgresql://127.0.0.1:{port}/app?sslmode=disable")
                .parse()
                .unwrap(),
            username: user.to_owned(),
        },
    };
    postgres::PostgresDriver::build(
        ControllerId::new(format!("pg-{port}")).unwrap(),
        &config,
        Some(SecretString::from(password.to_owned())),
    )
    .unwrap()
}

fn tls_driver(port: u16, tls: TlsTrust) -> PostgresDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls,
        timeout: Duration::from_secs(5),
        kind: ControllerKind::Postgres {
            endpoint: format!("postgresql://127.0.0.1:{port}/app?sslmode=require")
                .parse()
                .unwrap(),
            username: "postgres".to_owned(),
        },
    };
    postgres::PostgresDriver::build(
        ControllerId::new(format!("pg-{port}")).unwrap(),
        &config,
        Some(SecretString::from("postgres".to_owned())),
    )
    .unwrap()
}

pub(crate) fn driver(port: u16) -> PostgresDriver {
    driver_as(port, "postgres", "postgres")
}

pub(crate) fn ctx() -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("orc-dc2").unwrap(),
        Duration::from_secs(30),
    )
}

pub(crate) fn target(cap: &str, params: &[(&str, &str)]) -> Target {
    Target {
        capability: cap.to_owned(),
        resource: "self".to_owned(),
        params: params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        site: SiteId::new("dc2").unwrap(),
    }
}

#[tokio::test]
async fn the_failover_order_on_a_real_pair() {
    let Some(pair) = Pair::start() else { return };
    let old = driver(pair.primary);
    let new = driver(pair.replica);
    eprintln!("Phase: a client holds a session on the old primary and writes");
    let session = Pair::client(pair.primary).await.unwrap();
    session
        .batch_execute("CREATE TABLE t(id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();

    eprintln!("Phase: demote the old primary (application fence)");
    let before = old.check(&ctx(), &target("db.demote", &[])).await.unwrap();
    assert_eq!(before.verdict(), Verdict::Failed, "{before:?}");
    let r = old
        .perform(&ctx(), &target("db.demote", &[]))
        .await
        .unwrap();
    assert!(r.holds, "{r:?}");
    assert!(r.detail.contains("refused"), "{}", r.detail);
    assert!(
        session
            .batch_execute("INSERT INTO t VALUES (2)")
            .await
            .is_err(),
        "the session was ended"
    );
    let Err(e) = Pair::client(pair.primary).await else {
        panic!("new connections must be refused");
    };
    let msg = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(msg.contains("pg_hba.conf rejects"), "{e:?}");
    // Repeating it is success, and changes nothing.
    assert!(
        old.perform(&ctx(), &target("db.demote", &[]))
            .await
            .unwrap()
            .holds
    );

    eprintln!("Phase: the replica has everything the old primary wrote");
    let mut ready = None;
    for _ in 0..50 {
        let r = new
            .check(
                &ctx(),
                &target("replication.lag", &[("max_lag_bytes", "0")]),
            )
            .await
            .unwrap();
        if r.holds {
            ready = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = ready.expect("the replica caught up");
    assert!(ready.detail.contains(" 0 bytes behind"), "{}", ready.detail);

    eprintln!("Phase: promote the replica");
    assert_eq!(
        new.check(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap()
            .verdict(),
        Verdict::Failed
    );
    let p = new
        .perform(&ctx(), &target("db.promote", &[]))
        .await
        .unwrap();
    assert!(p.holds && p.detail.contains("timeline 2"), "{p:?}");
    assert!(
        new.perform(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap()
            .holds,
        "idempotent"
    );

    eprintln!("Phase: writes succeed on the new primary and fail on the old one");
    let c = Pair::client(pair.replica).await.unwrap();
    c.batch_execute("INSERT INTO t VALUES (3)").await.unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    assert!(Pair::client(pair.primary).await.is_err());
    // Lag readiness on a primary does not hold: it is nobody's replica any more.
    let l = new
        .check(&ctx(), &target("replication.lag", &[]))
        .await
        .unwrap();
    assert!(!l.holds && l.detail.contains("not a replica"), "{l:?}");
}

#[tokio::test]
async fn replication_lag_under_write_load_and_with_replay_held_back() {
    let Some(pair) = Pair::start() else { return };
    let replica = driver(pair.replica);
    Pair::sql(pair.primary, "CREATE TABLE load(id serial, pad text)").await;

    eprintln!("Phase: continuous writes; the replica keeps up within generous limits");
    let writer = tokio::spawn(async move {
        let c = Pair::client(pair.primary).await.unwrap();
        loop {
            c.batch_execute(
                "INSERT INTO load(pad) SELECT repeat('x', 200) FROM generate_series(1, 500)",
            )
            .await
            .unwrap();
        }
    });
    let lenient = target(
        "replication.lag",
        &[("max_lag_bytes", "67108864"), ("max_lag_seconds", "10")],
    );
    let mut seen = Vec::new();
    for _ in 0..10 {
        let r = replica.check(&ctx(), &lenient).await.unwrap();
        assert!(r.holds, "{r:?}");
        seen.push(r.detail);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    writer.abort();
    assert!(
        seen.iter().all(|d| d.contains("WAL receiver streaming")),
        "{seen:?}"
    );

    eprintln!("Phase: replay paused while 8 MB are written: the limit is exceeded");
    Pair::sql(pair.replica, "SELECT pg_wal_replay_pause()").await;
    Pair::sql(
        pair.primary,
        "INSERT INTO load(pad) SELECT repeat('y', 1000) FROM generate_series(1, 8000)",
    )
    .await;
    let strict = target("replication.lag", &[("max_lag_bytes", "1048576")]);
    let mut behind = None;
    for _ in 0..50 {
        let r = replica.check(&ctx(), &strict).await.unwrap();
        if !r.holds {
            behind = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let behind = behind.expect("the lag showed");
    let bytes: f64 = behind
        .detail
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes > 1_048_576.0, "{}", behind.detail);

    eprintln!("Phase: replay resumes and readiness returns");
    Pair::sql(pair.replica, "SELECT pg_wal_replay_resume()").await;
    let mut ok = false;
    for _ in 0..100 {
        if replica.check(&ctx(), &strict).await.unwrap().holds {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the replica caught up again");

    let e = replica
        .check(
            &ctx(),
            &target("replication.lag", &[("max_lag_bytes", "lots")]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected);
}

#[tokio::test]
async fn probe_identity_grades_health_and_discovery() {
    let Some(pair) = Pair::start() else { return };
    let p1 = driver(pair.primary).probe(&ctx()).await.unwrap();
    let p2 = driver(pair.replica).probe(&ctx()).await.unwrap();
    eprintln!("Phase: one lineage, two members");
    assert_eq!(
        p1.identity.facts["system_identifier"],
        p2.identity.facts["system_identifier"]
    );
    assert_ne!(p1.identity.id, p2.identity.id);
    assert!(
        p1.identity
            .id
            .ends_with(&format!("@127.0.0.1:{}", pair.primary))
    );
    assert_eq!(p1.identity.facts["role"], "primary");
    assert_eq!(p2.identity.facts["role"], "replica");
    // db.rejoin runs binaries on the server's host: its grade comes from the binding, not SQL.
    assert!(
        p1.grades
            .iter()
            .all(|g| g.grade == Grade::Proven || g.capability == "db.rejoin"),
        "{p1:?}"
    );
    assert!(
        p1.grades
            .iter()
            .any(|g| g.capability == "db.rejoin" && g.grade == Grade::Inferred),
        "{p1:?}"
    );

    eprintln!("Phase: a least-privilege role, then pg_promote granted");
    Pair::sql(
        pair.primary,
        "CREATE ROLE qfence LOGIN PASSWORD 'qpw'; GRANT pg_monitor TO qfence;",
    )
    .await;
    let grade = |p: &qfence_controllers::Probe, cap: &str| {
        p.grades.iter().find(|g| g.capability == cap).unwrap().grade
    };
    let limited = driver_as(pair.primary, "qfence", "qpw")
        .probe(&ctx())
        .await
        .unwrap();
    assert_eq!(grade(&limited, "db.promote"), Grade::Failed, "{limited:?}");
    assert_eq!(grade(&limited, "db.demote"), Grade::Failed);
    assert_eq!(grade(&limited, "replication.lag"), Grade::Proven);
    Pair::sql(
        pair.primary,
        "GRANT EXECUTE ON FUNCTION pg_catalog.pg_promote(boolean, integer) TO qfence",
    )
    .await;
    let granted = driver_as(pair.primary, "qfence", "qpw")
        .probe(&ctx())
        .await
        .unwrap();
    assert_eq!(grade(&granted, "db.promote"), Grade::Proven);

    eprintln!("Phase: the probe changed nothing");
    let c = Pair::client(pair.primary).await.unwrap();
    let allowed: bool = c
        .query_one(
            "SELECT datallowconn FROM pg_database WHERE datname = 'app'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(allowed);
    let rec: bool = Pair::client(pair.replica)
        .await
        .unwrap()
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(rec);

    eprintln!("Phase: health, with and without an expected role");
    let h = driver(pair.primary)
        .check(&ctx(), &target("db.health", &[]))
        .await
        .unwrap();
    assert!(h.holds && h.detail.contains("primary"), "{h:?}");
    let h = driver(pair.primary)
        .check(&ctx(), &target("db.health", &[("expect_role", "replica")]))
        .await
        .unwrap();
    assert!(!h.holds, "{h:?}");

    eprintln!("Phase: discovery names the server, its role and its replicas");
    let found = driver(pair.primary).discover(&ctx()).await.unwrap();
    assert!(
        found.iter().any(|f| f.capability == "db.demote"),
        "{found:?}"
    );
    assert!(found[0].description.contains("replica1"), "{found:?}");
    let found = driver(pair.replica).discover(&ctx()).await.unwrap();
    assert!(
        found.iter().any(|f| f.capability == "replication.lag"),
        "{found:?}"
    );

    let probs = driver(pair.primary)
        .check_binding(
            &ctx(),
            &Target {
                resource: "elsewhere".into(),
                ..target("db.health", &[("expect_role", "boss")])
            },
        )
        .await
        .unwrap();
    assert_eq!(probs.len(), 2, "{probs:?}");
    assert!(
        driver(pair.primary)
            .check_binding(&ctx(), &target("db.health", &[]))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn errors_carry_their_kind_and_deadlines_hold() {
    // Needs no server: a closed port, and one that accepts but never answers.
    let closed = free_port();
    let r = driver(closed)
        .check(&ctx(), &target("db.demote", &[]))
        .await;
    assert_eq!(
        r.as_ref().unwrap_err().kind,
        ErrorKind::Unreachable,
        "{r:?}"
    );
    assert_eq!(
        qfence_controllers::driver::fence_verdict(&r),
        Verdict::Unknown
    );

    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let c = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(300),
    );
    let start = std::time::Instant::now();
    let e = driver(port)
        .perform(&c, &target("db.promote", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(start.elapsed() < Duration::from_secs(2));
    hold.abort();

    let e = driver(closed)
        .undo(&ctx(), &target("db.demote", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    let e = driver(closed)
        .perform(&ctx(), &target("db.health", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error() {
    let Some(pair) = Pair::start() else { return };
    let e = driver_as(pair.primary, "postgres", "n0t-the-pw")
        .check(&ctx(), &target("db.health", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(!e.to_string().contains("n0t-the-pw"));
}

#[tokio::test]
async fn a_slow_promotion_is_seen_through_by_the_read_back() {
    let Some(pair) = Pair::start() else { return };
    // Hold the replica's startup process: signalled, the promotion does not happen until
    // it resumes.
    let pid: i32 = Pair::client(pair.replica)
        .await
        .unwrap()
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let process = rustix::process::Pid::from_raw(pid).expect("a backend's pid");
    rustix::process::kill_process(process, rustix::process::Signal::STOP).expect("SIGSTOP");
    // pg_promote(false) returns at once; the process resumes after 5 s of the call's 8 s.
    let resume = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        rustix::process::kill_process(process, rustix::process::Signal::CONT)
    });
    let c = CallContext::with_timeout(OrchestratorId::new("o").unwrap(), Duration::from_secs(8));
    let start = std::time::Instant::now();
    let r = driver(pair.replica)
        .perform(&c, &target("db.promote", &[]))
        .await;
    resume.await.unwrap().expect("SIGCONT");
    let r = r.unwrap();
    assert!(r.holds, "{r:?}");
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "it waited for the read-back: {:?}",
        start.elapsed()
    );
    // The driver's clock starts at pg_promote, after its connection and recovery check, while
    // the 5 s count from before the call: the named wait is a little under 5 s (CI read
    // 4,970 ms). Without the wait it would be tens of milliseconds.
    let took = crate::postgres_switchover_gap::step_ms(&r.detail, "promote");
    assert!(took >= 4000, "the reading names the wait: {}", r.detail);
}

/// `db.demote` has no undo: the suite leaves the primary demoted, which is checked here
/// through a plain client connection.
#[tokio::test]
async fn postgres_passes_the_compliance_suite_on_a_real_primary() {
    let Some(pair) = Pair::start() else { return };
    let case = crate::compliance::Case {
        driver: driver(pair.primary),
        fence: crate::compliance::target("db.demote", "self"),
        missing: None,
        action_timeout: Duration::from_secs(30),
        slow_fence: false,
    };
    crate::compliance::run(case).await;
    let e = Pair::client(pair.primary)
        .await
        .expect_err("a demoted primary refuses clients");
    let msg = e.as_db_error().map(|d| d.message().to_owned());
    assert!(
        msg.as_deref().is_some_and(|m| m.contains("pg_hba.conf")),
        "{e}: {msg:?}"
    );
}

/// PostgreSQL's TLS goes through the shared verifier (`tls.rs`): a CA file, a pin, the
/// fingerprint shown for pinning, a changed certificate refused with both fingerprints.
#[tokio::test]
async fn tls_is_verified_by_the_shared_verifier_with_ca_file_and_pin() {
    let Some(pair) = Pair::start_with(&[("PG_SSL", "1")]) else {
        return;
    };
    let ca = pair.cacert.display().to_string();
    let p = tls_driver(pair.primary, TlsTrust::CaFile(ca))
        .probe(&ctx())
        .await
        .unwrap();
    let fp = p
        .identity
        .tls_fingerprint
        .clone()
        .expect("a TLS probe shows the fingerprint");
    assert!(fp.starts_with("sha256:") && fp.len() == 71, "{fp}");

    let health = target("db.health", &[]);
    let r = tls_driver(pair.primary, TlsTrust::Pin(fp.clone()))
        .check(&ctx(), &health)
        .await
        .unwrap();
    assert!(r.holds, "{r:?}");

    let other = format!("sha256:{}", "ab".repeat(32));
    let e = tls_driver(pair.primary, TlsTrust::Pin(other.clone()))
        .check(&ctx(), &health)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(
        e.message.contains(&fp) && e.message.contains(&other),
        "the error names both fingerprints: {e}"
    );

    let e = tls_driver(pair.primary, TlsTrust::SystemRoots)
        .check(&ctx(), &health)
        .await
        .unwrap_err();
    assert!(
        e.message.contains("not trusted") && e.message.contains(&fp),
        "an untrusted certificate is refused and shown for pinning: {e}"
    );

    let p = tls_driver(pair.primary, TlsTrust::Insecure)
        .probe(&ctx())
        .await
        .unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("insecure: true")),
        "{:?}",
        p.warnings
    );
}

/// The postmaster's pid: the parent of a backend.
async fn postmaster_pid(port: u16) -> i32 {
    let backend: i32 = Pair::client(port)
        .await
        .unwrap()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).unwrap();
    // pid (comm) state ppid ...: comm may hold spaces, so count from its closing parenthesis.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_killed_postmaster_reads_definitively_unhealthy_and_a_silent_server_ambiguously() {
    let Some(pair) = Pair::start() else { return };
    let health = target("db.health", &[("expect_role", "primary")]);
    let r = driver(pair.primary).check(&ctx(), &health).await.unwrap();
    assert!(r.holds && !r.definitive, "{r:?}");

    // The kill: the postmaster gone, its host still answering.
    let pid = postmaster_pid(pair.primary).await;
    let process = rustix::process::Pid::from_raw(pid).expect("the postmaster's pid");
    rustix::process::kill_process(process, rustix::process::Signal::KILL).expect("SIGKILL");
    let d = driver(pair.primary);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = d.check(&ctx(), &health).await;
        if matches!(&r, Ok(r) if !r.holds) || std::time::Instant::now() > end {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let r = r.expect("a reading, not an error");
    assert!(!r.holds && r.definitive, "{r:?}");
    assert!(r.detail.contains("refused the connection"), "{}", r.detail);

    // A server that accepts the connection and never answers is a timeout: ambiguous.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let c = CallContext::with_timeout(OrchestratorId::new("o").unwrap(), Duration::from_secs(1));
    let e = driver(port).check(&c, &health).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    drop(silent);
}

/// `db.standby` for a standby of the owner at `owner_site`: the owner's address per site.
fn standby_target(pair: &Pair, owner_site: &str) -> Target {
    let dc1 = format!("127.0.0.1:{}", pair.primary);
    let dc2 = format!("127.0.0.1:{}", pair.replica);
    Target {
        site: SiteId::new(owner_site).unwrap(),
        ..target("db.standby", &[("dc1", &dc1), ("dc2", &dc2)])
    }
}

#[tokio::test]
async fn a_healthy_replica_reads_replicating_and_one_promoted_by_hand_is_not_a_standby() {
    let Some(pair) = Pair::start() else { return };
    let replica = driver(pair.replica);
    let following_dc1 = standby_target(&pair, "dc1");

    eprintln!("Phase: the healthy pair's replica is a standby of dc1, replicating");
    let mut seen = None;
    for _ in 0..100 {
        let r = replica.check(&ctx(), &following_dc1).await.unwrap();
        if r.holds && r.detail.contains("replicating") {
            seen = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = seen.expect("the replica streams from the primary");
    let want = format!("standby, replicating from 127.0.0.1:{}, lag ", pair.primary);
    assert!(r.detail.starts_with(&want), "{}", r.detail);
    assert!(r.detail.ends_with(" bytes"), "{}", r.detail);

    eprintln!("Phase: as a standby of dc2 it follows the wrong server");
    let r = replica
        .check(&ctx(), &standby_target(&pair, "dc2"))
        .await
        .unwrap();
    assert!(!r.holds, "{r:?}");
    assert!(
        r.detail.contains(&format!(
            "follows 127.0.0.1:{}, not the owner dc2",
            pair.primary
        )),
        "{}",
        r.detail
    );

    eprintln!("Phase: the primary itself is no standby: it is writable");
    let r = driver(pair.primary)
        .check(&ctx(), &standby_target(&pair, "dc2"))
        .await
        .unwrap();
    assert!(!r.holds && r.detail.contains("is writable"), "{r:?}");

    eprintln!("Phase: the replica promoted by hand is no standby either");
    Pair::sql(pair.replica, "SELECT pg_promote(true, 30)").await;
    let r = replica.check(&ctx(), &following_dc1).await.unwrap();
    assert!(!r.holds, "{r:?}");
    assert!(
        r.detail.contains("is writable: not in recovery"),
        "{}",
        r.detail
    );
}
