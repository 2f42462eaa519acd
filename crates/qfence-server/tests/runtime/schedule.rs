//! The engine's real timing: with `interval_seconds: 1`, the owner's health is checked once a
//! second, not every other second.

use std::time::Duration;

use anyhow::Result;
use qfence_core::Millis;

use crate::lab::{Orchestrator, Sims, eventually, phase, plan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_health_is_checked_every_interval_not_every_other_one() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), true).await?;
    let health = o.key("erp-db", "dc1", 3);
    let read_at = || {
        o.engine
            .runtime(&plan())
            .observations
            .get(&health)
            .map(|o| o.at)
    };

    phase("the first reading of dc1's vm.status");
    eventually(
        Duration::from_secs(20),
        "a first health reading",
        || async { read_at() },
    )
    .await?;

    phase("8 s of readings, polled every 20 ms");
    let mut seen: Vec<Millis> = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(8);
    while tokio::time::Instant::now() < until {
        if let Some(at) = read_at()
            && seen.last() != Some(&at)
        {
            seen.push(at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    o.shutdown().await;
    sims.stop().await;
    let gaps: Vec<u64> = seen.windows(2).map(|w| w[1].0 - w[0].0).collect();
    eprintln!("health readings {gaps:?} ms apart");
    // Every other interval would be 4 readings with 2 s gaps; a loaded shared machine may
    // delay a tick now and then, never by a whole interval each time.
    assert!(
        seen.len() >= 7,
        "{} readings in 8 s: gaps {gaps:?} ms",
        seen.len()
    );
    let median = {
        let mut g = gaps.clone();
        g.sort_unstable();
        g[g.len() / 2]
    };
    assert!(
        (800..=1200).contains(&median),
        "the median gap is {median} ms, not about 1000: {gaps:?}"
    );
    Ok(())
}
