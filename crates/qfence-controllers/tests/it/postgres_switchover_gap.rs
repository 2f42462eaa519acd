//! A planned switchover's write gap (issue 19) against a real PostgreSQL 15 pair: the old
//! primary's clean stop (`db.demote` with `data_dir`) and the replica's `db.promote` each take
//! less than 100 ms of work after the CHECKPOINT. pg_ctl's `-w` and pg_promote's own wait
//! each poll every 100 ms, so either wait alone takes its step past the limit.

use qfence_controllers::Driver as _;

use crate::postgres::{Pair, ctx, driver, target};

/// The `N` of "`step` N ms" in a reading's detail.
pub(crate) fn step_ms(detail: &str, step: &str) -> u64 {
    let key = format!("{step} ");
    detail
        .match_indices(&key)
        .find_map(|(i, _)| {
            let rest = &detail[i + key.len()..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[digits..]
                .starts_with(" ms")
                .then(|| rest[..digits].parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no \"{step} N ms\" in {detail:?}"))
}

#[tokio::test]
async fn a_switchover_stops_the_old_primary_and_promotes_the_replica_within_100_ms_each() {
    // A loaded machine may stretch one attempt; every attempt is a fresh pair.
    let mut seen = Vec::new();
    for attempt in 1..=3 {
        let Some(pair) = Pair::start() else { return };
        let demote = target(
            "db.demote",
            &[("data_dir", pair.emu.var("PG_PRIMARY_DATA"))],
        );
        eprintln!("Phase: attempt {attempt}: rows at dc1, so the stop has WAL to ship");
        let c = Pair::client(pair.primary).await.unwrap();
        c.batch_execute("CREATE TABLE t(id int); INSERT INTO t SELECT generate_series(1, 1000)")
            .await
            .unwrap();
        drop(c);

        eprintln!("Phase: the clean stop of dc1, then the promotion of dc2");
        let d = driver(pair.primary).perform(&ctx(), &demote).await.unwrap();
        assert!(
            d.holds && d.detail.contains("pg_controldata: shut down"),
            "{d:?}"
        );
        assert!(Pair::client(pair.primary).await.is_err(), "dc1 is stopped");
        let p = driver(pair.replica)
            .perform(&ctx(), &target("db.promote", &[]))
            .await
            .unwrap();
        assert!(p.holds, "{p:?}");
        assert!(!crate::postgres_rejoin::in_recovery(pair.replica).await);

        let (stop, promote) = (step_ms(&d.detail, "stop"), step_ms(&p.detail, "promote"));
        eprintln!("attempt {attempt}: {} / {}", d.detail, p.detail);
        if stop < 100 && promote < 100 {
            return;
        }
        seen.push(format!("stop {stop} ms, promote {promote} ms"));
    }
    panic!("each step took 100 ms or more in every attempt: {seen:?}");
}

#[test]
fn step_times_are_read_from_a_detail() {
    let d = "x: no server runs on /stop 3/d; pg_controldata: shut down \
             (CHECKPOINT 12 ms, stop 45 ms, read-back 20 ms)";
    assert_eq!(step_ms(d, "stop"), 45);
    assert_eq!(step_ms(d, "CHECKPOINT"), 12);
    assert_eq!(step_ms("a primary (promote 7 ms)", "promote"), 7);
}
