//! After a failover the old PostgreSQL primary comes back as a replica when an operator lets
//! it (issue 19, ADR 0023 "After a failover"), end to end: a real PostgreSQL 15 pair on
//! loopback, the built `qfence serve` at dc2 over it with the pg_failover bench's plan (a
//! clean-stop `db.demote`, `db.rejoin`, a fence agent standing in for each host's BMC), dc1
//! killed. dc1 stays down until `qfence plan rejoin db dc1`; then it is rewound and streams
//! from dc2 with dc2's rows. Needs Debian's postgresql-15 (the start script installs it) and
//! root (the servers run as `postgres`); `QFENCE_SKIP_EMULATORS=1` skips it when neither is
//! there.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]
// The bench's modules hold more than this test uses.
#![allow(dead_code)]

#[path = "../benches/pg_failover/orchestrator.rs"]
mod orchestrator;
#[path = "../benches/pg_failover/pair.rs"]
mod pair;
#[path = "../benches/pg_failover/writer.rs"]
mod writer;

use std::path::{Path, PathBuf};
use std::time::Duration;

use orchestrator::{Endpoints, Orchestrator};
use pair::Pair;

/// What the bench's orchestrator module reads of a profile.
#[derive(Debug)]
pub struct Profile {
    pub plan: Vec<&'static str>,
    pub pg_timeout: Option<f64>,
    pub fence_agent_timeout: Option<f64>,
}

pub fn now_ms() -> u64 {
    qfence_model::time::now_unix_ms()
}

fn free_ports() -> [u16; 2] {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    [
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    ]
}

async fn rows(url: &str) -> Option<i64> {
    let c = writer::connect(url).await?;
    c.query_one("SELECT count(*) FROM bench", &[])
        .await
        .ok()
        .map(|r| r.get(0))
}

/// Whether the server at `url` is in recovery and its WAL receiver streams from `port`.
async fn streams_from(url: &str, port: u16) -> bool {
    let Some(c) = writer::connect(url).await else {
        return false;
    };
    c.query_one(
        "SELECT pg_is_in_recovery() AND coalesce((SELECT status = 'streaming' \
         AND sender_port = $1 FROM pg_stat_wal_receiver), false)",
        &[&i32::from(port)],
    )
    .await
    .is_ok_and(|r| r.get::<_, bool>(0))
}

/// Polls `f` every 200 ms for up to `secs`; the last status in the panic.
async fn wait_for<F, Fut>(o: &Orchestrator, secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !f().await {
        if tokio::time::Instant::now() > deadline {
            panic!("{what} not within {secs} s: {:?}", o.status().await);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn said(o: &Orchestrator, words: &str) -> bool {
    o.events()
        .iter()
        .any(|e| e["message"].as_str().is_some_and(|m| m.contains(words)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_plan_rejoin_brings_the_old_primary_back_as_a_replica() {
    let root = PathBuf::from(format!("/tmp/qfrj-{}", std::process::id()));
    let agents = root.join("bin");
    pair::write_agent(&agents).unwrap();
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators");
    let ports = free_ports();
    let pair = match Pair::start(&tools, &root.join("pg"), ports) {
        Ok(p) => p,
        Err(e) if std::env::var_os("QFENCE_SKIP_EMULATORS").is_some_and(|v| v == "1") => {
            eprintln!("SKIPPED (QFENCE_SKIP_EMULATORS=1): {e:#}");
            return;
        }
        Err(e) => panic!("{e:#}"),
    };
    writer::create_table(&pair.url(0)).await.unwrap();
    let e = Endpoints {
        pg: ports,
        sockets: pair.sockets.clone(),
        ports,
        passfile: pair.passfile().unwrap(),
    };
    let profile = Profile {
        plan: vec!["failover_after_definitive: 2"],
        pg_timeout: None,
        fence_agent_timeout: None,
    };
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_qfence"));
    let o = Orchestrator::start(&exe, &root.join("q"), &agents, &profile, &e)
        .await
        .unwrap();
    o.wait_steady(Duration::from_secs(120)).await.unwrap();

    eprintln!("Phase: three rows at dc1, replicated; dc1 killed: the plan fails over to dc2");
    let c = writer::connect(&pair.url(0)).await.unwrap();
    c.batch_execute("INSERT INTO bench VALUES (1, now()), (2, now()), (3, now())")
        .await
        .unwrap();
    drop(c);
    let dc2 = pair.url(1);
    wait_for(&o, 30, "the rows at dc2", || async {
        rows(&dc2).await == Some(3)
    })
    .await;
    pair.kill(&agents.join("fence_pgkill"), 0).unwrap();
    wait_for(&o, 120, "steady at dc2", || async {
        o.status()
            .await
            .is_ok_and(|(owner, _, phase, _)| owner == "dc2" && phase == "steady")
    })
    .await;
    let (_, generation, _, _) = o.status().await.unwrap();

    eprintln!("Phase: nobody asked: dc1 stays down");
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(writer::connect(&pair.url(0)).await.is_none(), "dc1 runs");
    assert!(!said(&o, "rejoining dc1"));
    writer::connect(&dc2)
        .await
        .unwrap()
        .batch_execute("INSERT INTO bench VALUES (4, now())")
        .await
        .unwrap();

    eprintln!("Phase: qfence plan rejoin db dc1: rewound, a replica streaming from dc2");
    let g = generation.to_string();
    let out = o
        .cli(&["plan", "rejoin", "db", "dc1", "--generation", &g])
        .await
        .unwrap();
    assert!(out.starts_with("rejoin db: generation"), "{out}");
    let dc1 = pair.url(0);
    wait_for(&o, 90, "dc1 streaming from dc2", || async {
        streams_from(&dc1, ports[1]).await
    })
    .await;
    wait_for(&o, 30, "dc2's rows at dc1", || async {
        rows(&dc1).await == Some(4)
    })
    .await;
    wait_for(&o, 30, "the rejoin read back", || async {
        said(&o, "dc1 rejoined db as a replica of dc2")
    })
    .await;
    assert!(said(&o, "bench lets dc1 rejoin db"));
    assert_eq!(o.status().await.unwrap().0, "dc2");

    eprintln!("Phase: a second rejoin is refused at once: dc1 no longer waits");
    let e = o
        .cli(&["plan", "rejoin", "db", "dc1", "--generation", &g])
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("not an old owner of db waiting to rejoin"),
        "{e:#}"
    );
    o.stop().await;
    drop(pair);
    let _ = std::fs::remove_dir_all(&root);
}
