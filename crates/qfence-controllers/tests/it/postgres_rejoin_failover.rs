//! `db.rejoin` of a failover's old primary against a real PostgreSQL 15 pair (ADR 0023, "After
//! a failover"): dc2 promoted while dc1 still took a write (the copies diverge), then dc1
//! killed as a power fence leaves it (no shutdown, "in production"). The rejoin rewinds the
//! crashed copy to dc2's history; when pg_rewind cannot (the WAL it needs is gone), it re-clones
//! dc2, keeps the diverged directory aside, and dc1 streams from dc2 either way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use qfence_controllers::Driver;

use crate::postgres::{Pair, ctx, driver, target};
use crate::postgres_rejoin::{Rejoin, count, in_recovery, no_secret_in, wait_rows};

/// The processes whose parent is `pid` (from /proc: field 4 of `stat`, after the command).
fn children(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// Kills dc1's server as a power cut would: the postmaster and its children, no shutdown
/// (signalled through rustix, never kill(1): see scripts/test).
fn kill_primary(data: &str) {
    use rustix::process::{Pid, Signal, kill_process};
    let pid = std::fs::read_to_string(Path::new(data).join("postmaster.pid")).unwrap();
    let pid = pid.lines().next().unwrap().trim().to_owned();
    let raw: i32 = pid.parse().expect("a pid");
    for child in children(raw) {
        if let Some(c) = Pid::from_raw(child) {
            let _ = kill_process(c, Signal::KILL);
        }
    }
    kill_process(Pid::from_raw(raw).expect("a pid"), Signal::KILL).expect("SIGKILL");
    for _ in 0..100 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("dc1's postmaster {pid} outlived SIGKILL");
}

/// Rows 1..=3 at dc1, replicated; dc2 promoted (the failover); row 100 at dc1 only (written
/// before its fence took it: the diverged write); row 4 at dc2. Returns after dc1 is killed.
async fn failed_over(pair: &Pair, rejoin: &Rejoin) {
    let c = Pair::client(pair.primary).await.unwrap();
    c.batch_execute("CREATE TABLE t(id int); INSERT INTO t VALUES (1), (2), (3)")
        .await
        .unwrap();
    assert_eq!(wait_rows(pair.replica, 3).await, 3);
    eprintln!("Phase: dc2 promoted while dc1 still takes a write, then dc1 is fenced");
    let dc2 = driver(pair.replica);
    assert!(
        dc2.perform(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap()
            .holds
    );
    c.batch_execute("INSERT INTO t VALUES (100)").await.unwrap();
    drop(c);
    kill_primary(&rejoin.data);
    Pair::client(pair.replica)
        .await
        .unwrap()
        .batch_execute("INSERT INTO t VALUES (4)")
        .await
        .unwrap();
}

/// dc1 in recovery on its own port, with dc2's rows (1, 2, 3, 4) and not its diverged 100.
async fn follows_dc2(pair: &Pair) {
    assert!(in_recovery(pair.primary).await);
    assert_eq!(wait_rows(pair.primary, 4).await, 4);
    let c = Pair::client(pair.primary).await.unwrap();
    let diverged: i64 = c
        .query_one("SELECT count(*) FROM t WHERE id = 100", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(diverged, 0, "dc2's history, not dc1's");
    assert_eq!(count(pair.replica).await, 4);
}

fn beside(data: &str, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{data}{suffix}"))
}

#[tokio::test]
async fn a_killed_old_primary_is_rewound_and_rejoins_as_a_replica_after_a_failover() {
    let Some(pair) = Pair::start() else { return };
    let rejoin = Rejoin::new(&pair);
    failed_over(&pair, &rejoin).await;
    let dc1 = driver(pair.primary);

    eprintln!("Phase: dc1's host answers: its demote fence reads the server stopped, crashed");
    let d = dc1.check(&ctx(), &rejoin.demote()).await.unwrap();
    assert!(
        !d.holds && d.detail.contains("no server runs") && d.detail.contains("in production"),
        "{d:?}"
    );

    eprintln!("Phase: rejoin: crash recovery and pg_rewind, then a replica of dc2");
    let r = dc1.perform(&ctx(), &rejoin.target()).await;
    let log = Path::new(&rejoin.data).join("qfence-rejoin.log");
    let r =
        r.unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(log).unwrap_or_default()));
    assert!(r.holds && r.detail.starts_with("rewound: "), "{r:?}");
    assert!(
        r.detail
            .contains(&format!("streaming from 127.0.0.1:{}", pair.replica)),
        "{}",
        r.detail
    );
    follows_dc2(&pair).await;
    assert!(!beside(&rejoin.data, ".diverged").exists(), "no re-clone");
    no_secret_in(&Path::new(&rejoin.data).join("postgresql.auto.conf"));
}

#[tokio::test]
async fn when_pg_rewind_fails_the_old_primary_is_recloned_and_its_copy_kept() {
    let Some(pair) = Pair::start() else { return };
    let rejoin = Rejoin::new(&pair);
    failed_over(&pair, &rejoin).await;
    let dc1 = driver(pair.primary);

    eprintln!("Phase: dc1's WAL is lost: pg_rewind cannot find where the copies forked");
    let wal = Path::new(&rejoin.data).join("pg_wal");
    let mut removed = 0;
    for f in std::fs::read_dir(&wal).unwrap() {
        let f = f.unwrap();
        let name = f.file_name().to_string_lossy().into_owned();
        if name.len() == 24 && name.chars().all(|c| c.is_ascii_hexdigit()) {
            std::fs::remove_file(f.path()).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0, "no WAL segment in {}", wal.display());

    eprintln!("Phase: rejoin: pg_rewind fails, pg_basebackup re-clones dc2");
    let r = dc1.perform(&ctx(), &rejoin.target()).await;
    let log = Path::new(&rejoin.data).join("qfence-rejoin.log");
    let r =
        r.unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(log).unwrap_or_default()));
    eprintln!("{}", r.detail);
    let kept = beside(&rejoin.data, ".diverged");
    assert!(
        r.holds
            && r.detail.starts_with("pg_rewind failed (")
            && r.detail.contains(&format!(
                "re-cloned from the owner, the old copy kept at {}",
                kept.display()
            )),
        "{r:?}"
    );
    follows_dc2(&pair).await;
    // The diverged copy is kept for the operator, the clone's scratch directory is gone, and
    // dc1 kept its own configuration (it answers on its own port, above) with no secret.
    assert!(kept.join("PG_VERSION").exists());
    assert!(!beside(&rejoin.data, ".qfence-clone").exists());
    assert!(Path::new(&rejoin.data).join("standby.signal").exists());
    no_secret_in(&Path::new(&rejoin.data).join("postgresql.auto.conf"));

    eprintln!("Phase: a second rejoin of the replica is idempotent");
    assert!(dc1.perform(&ctx(), &rejoin.target()).await.unwrap().holds);
}
