//! `db.demote` as a clean stop and `db.rejoin` against a real PostgreSQL 15 pair (ADR 0023):
//! after a switchover dc1 → dc2 the old primary is a replica streaming from dc2, with every
//! acknowledged row, its own configuration and no password written anywhere.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use qfence_controllers::{Driver, ErrorKind};
use qfence_model::Verdict;

use crate::postgres::{Pair, ctx, driver, target};

/// A pgpass file owned by the data directory's owner, mode 0600 (libpq ignores a wider one).
pub(crate) fn passfile(pair: &Pair) -> String {
    let data = pair.emu.var("PG_PRIMARY_DATA").to_owned();
    let owner = std::fs::metadata(&data).unwrap();
    let path = pair.emu.run_dir().join("pg/pgpass");
    std::fs::write(
        &path,
        "127.0.0.1:*:replication:replicator:replpass\n127.0.0.1:*:*:postgres:postgres\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
    path.display().to_string()
}

/// The `db.rejoin` binding of the old primary (dc1), naming the new owner dc2.
pub(crate) struct Rejoin {
    pub(crate) data: String,
    primary: String,
    rewind: String,
}

impl Rejoin {
    pub(crate) fn new(pair: &Pair) -> Rejoin {
        let pass = passfile(pair);
        let p2 = pair.replica;
        Rejoin {
            data: pair.emu.var("PG_PRIMARY_DATA").to_owned(),
            primary: format!(
                "host=127.0.0.1 port={p2} user=replicator application_name=dc1 passfile={pass}"
            ),
            rewind: format!("host=127.0.0.1 port={p2} user=postgres dbname=app passfile={pass}"),
        }
    }

    pub(crate) fn target(&self) -> qfence_controllers::Target {
        target(
            "db.rejoin",
            &[
                ("data_dir", &self.data),
                ("primary_conninfo", &self.primary),
                ("rewind_conninfo", &self.rewind),
            ],
        )
    }

    pub(crate) fn demote(&self) -> qfence_controllers::Target {
        target("db.demote", &[("data_dir", &self.data)])
    }
}

pub(crate) async fn count(port: u16) -> i64 {
    let c = Pair::client(port).await.unwrap();
    c.query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0)
}

pub(crate) async fn in_recovery(port: u16) -> bool {
    let c = Pair::client(port).await.unwrap();
    c.query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until the replica at `port` has `n` rows of `t` (the table itself may not be there
/// yet).
pub(crate) async fn wait_rows(port: u16, n: i64) -> i64 {
    let mut last = 0;
    for _ in 0..100 {
        let c = Pair::client(port).await.unwrap();
        if let Ok(row) = c.query_one("SELECT count(*) FROM t", &[]).await {
            last = row.get(0);
        }
        if last == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

pub(crate) fn no_secret_in(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    for secret in ["replpass", "password"] {
        assert!(
            !text.contains(secret),
            "{} holds {secret:?}:\n{text}",
            path.display()
        );
    }
}

#[tokio::test]
async fn a_switchover_rejoins_the_old_primary_as_a_replica_of_the_new_owner() {
    let Some(pair) = Pair::start() else { return };
    let (dc1, dc2) = (driver(pair.primary), driver(pair.replica));
    let rejoin = Rejoin::new(&pair);
    eprintln!("Phase: 50 acknowledged rows at dc1");
    let c = Pair::client(pair.primary).await.unwrap();
    c.batch_execute("CREATE TABLE t(id int)").await.unwrap();
    for i in 1..=50 {
        c.execute("INSERT INTO t VALUES ($1)", &[&i]).await.unwrap();
    }
    drop(c);

    eprintln!("Phase: demote dc1: a checkpoint and a fast shutdown, read back");
    let before = dc1.check(&ctx(), &rejoin.demote()).await.unwrap();
    assert_eq!(before.verdict(), Verdict::Failed, "{before:?}");
    let d = dc1.perform(&ctx(), &rejoin.demote()).await.unwrap();
    assert!(
        d.holds && d.detail.contains("pg_controldata: shut down"),
        "{d:?}"
    );
    assert!(Pair::client(pair.primary).await.is_err(), "dc1 is stopped");
    assert!(
        dc1.perform(&ctx(), &rejoin.demote()).await.unwrap().holds,
        "idempotent"
    );

    eprintln!("Phase: promote dc2, write there");
    assert!(
        dc2.perform(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap()
            .holds
    );
    Pair::client(pair.replica)
        .await
        .unwrap()
        .batch_execute("INSERT INTO t VALUES (51)")
        .await
        .unwrap();
    assert_eq!(count(pair.replica).await, 51, "no acknowledged row lost");

    eprintln!("Phase: rejoin dc1 as a replica of dc2");
    let r0 = dc1.check(&ctx(), &rejoin.target()).await.unwrap();
    assert!(!r0.holds, "{r0:?}");
    let t0 = tokio::time::Instant::now();
    let r = dc1.perform(&ctx(), &rejoin.target()).await.unwrap();
    eprintln!("rejoin took {:?}: {}", t0.elapsed(), r.detail);
    assert!(r.holds, "{r:?}");
    let from = format!("streaming from 127.0.0.1:{}", pair.replica);
    assert!(r.detail.contains(&from), "{}", r.detail);
    // dc1 answers on its own port (its configuration survived) and is in recovery.
    assert!(in_recovery(pair.primary).await);
    assert_eq!(
        wait_rows(pair.primary, 51).await,
        51,
        "dc1 replays dc2's row"
    );
    assert!(
        dc1.perform(&ctx(), &rejoin.target()).await.unwrap().holds,
        "idempotent"
    );
    let check = dc1.check(&ctx(), &rejoin.target()).await.unwrap();
    assert!(check.holds, "{check:?}");
    // As a standby, the demote fence still holds.
    assert!(dc1.check(&ctx(), &rejoin.demote()).await.unwrap().holds);
    no_secret_in(&Path::new(&rejoin.data).join("postgresql.auto.conf"));
}

#[tokio::test]
async fn a_diverged_old_primary_is_rewound_and_a_running_primary_is_never_rejoined() {
    let Some(pair) = Pair::start() else { return };
    let (dc1, dc2) = (driver(pair.primary), driver(pair.replica));
    let rejoin = Rejoin::new(&pair);
    Pair::client(pair.primary)
        .await
        .unwrap()
        .batch_execute("CREATE TABLE t(id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    assert_eq!(wait_rows(pair.replica, 1).await, 1);

    eprintln!("Phase: dc2 promoted while dc1 still writes: the timelines diverge");
    assert!(
        dc2.perform(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap()
            .holds
    );
    Pair::client(pair.primary)
        .await
        .unwrap()
        .batch_execute("INSERT INTO t VALUES (2)")
        .await
        .unwrap();

    eprintln!("Phase: a rejoin of a running primary is refused, and it stays a primary");
    let e = dc1.perform(&ctx(), &rejoin.target()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(e.to_string().contains("demote it first"), "{e}");
    assert!(!in_recovery(pair.primary).await);
    assert_eq!(count(pair.primary).await, 2);

    eprintln!("Phase: stopped, rewound, streaming from dc2; the diverged row is gone");
    assert!(dc1.perform(&ctx(), &rejoin.demote()).await.unwrap().holds);
    let r = dc1.perform(&ctx(), &rejoin.target()).await;
    let log = Path::new(&rejoin.data).join("qfence-rejoin.log");
    let r =
        r.unwrap_or_else(|e| panic!("{e}\n{}", std::fs::read_to_string(log).unwrap_or_default()));
    assert!(r.holds, "{r:?}");
    assert!(in_recovery(pair.primary).await);
    assert_eq!(count(pair.primary).await, 1, "dc2's history, not dc1's");
}
