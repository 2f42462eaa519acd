//! Many plans on one orchestrator: every plan is checked every couple of intervals, and none
//! is "left alone" while the leader holds its lease (the engine used to decide plans one after
//! another on one lease reading, so plans late in a tick starved, always the same ones).

use std::time::Duration;

use anyhow::Result;
use qfence_core::{BindingKey, Millis, Observed};
use qfence_lab::lab::{Scenario, Sims, TIMINGS, scaled_plan_name};
use qfence_model::PlanId;
use qfence_runtime::events::EventKind;

use crate::lab::{Orchestrator, eventually, phase};

const PLANS: usize = 200;
const INTERVAL: Duration = Duration::from_secs(1);

/// The newest observation of any of the plan's bindings.
fn newest_check(o: &Orchestrator, plan: &PlanId) -> Option<Millis> {
    o.engine
        .runtime(plan)
        .observations
        .values()
        .map(|obs| obs.at)
        .max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_200_plans_every_plan_is_checked_every_couple_of_intervals_and_none_is_left_alone()
-> Result<()> {
    // The lab's plan shape, 200 times over the shared controllers, every controller reachable
    // from both sites (one orchestrator, at dc1, runs everything), on the lab's timings.
    let scenario = Scenario::scaled(PLANS, Duration::from_secs(2));
    let sims = Sims::start_with(&scenario).await?;
    let o = Orchestrator::start(&sims.scaled_config(&scenario.plans, TIMINGS), true).await?;
    let plans: Vec<PlanId> = (0..PLANS)
        .map(|i| PlanId::new(scaled_plan_name(i)).expect("a plan name"))
        .collect();

    phase("every plan reads dc1 healthy and dc2 fenced");
    let ready = || {
        plans
            .iter()
            .filter(|p| {
                let (dc1_health, dc2_fence) =
                    (o.key(p.as_str(), "dc1", 3), o.key(p.as_str(), "dc2", 0));
                let view = o.engine.runtime(p);
                let holds = |k: &BindingKey| {
                    view.observations
                        .get(k)
                        .is_some_and(|obs| obs.value == Observed::Holds)
                };
                holds(&dc1_health) && holds(&dc2_fence)
            })
            .count()
    };
    let settled = eventually(Duration::from_secs(90), "every plan checked", || async {
        let n = ready();
        eprintln!("{n} of {PLANS} plans read dc1 healthy and dc2 fenced");
        (n == PLANS).then_some(())
    })
    .await;
    if settled.is_err() {
        for e in o
            .engine
            .events()
            .iter()
            .filter(|e| e.plan.as_deref() == Some(scaled_plan_name(0).as_str()))
            .take(60)
        {
            eprintln!("{:>5} {:<9} {}", e.seq, e.kind.as_str(), e.message);
        }
        for p in plans.iter().take(3) {
            let view = o.engine.runtime(p);
            eprintln!("{p}: {:?}\n  {:?}", view.last_reason, view.observations);
        }
    }
    settled?;

    phase("for four intervals, every plan gets a new check within two intervals plus a timeout");
    // A check takes up to its controller's timeout (2 s) after the decision that asked for it.
    let allowed = INTERVAL * 2 + Duration::from_secs(2);
    let clock = o.engine.clock();
    let mut worst = Duration::ZERO;
    let mut late = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(INTERVAL / 2).await;
        let now = clock.now();
        for p in &plans {
            let age = newest_check(&o, p).map_or(Duration::MAX, |at| now.since(at));
            worst = worst.max(age);
            if age > allowed {
                late.push(format!("{p}: newest check {age:?} old"));
            }
        }
    }
    eprintln!("oldest newest-check seen: {worst:?}");
    assert!(
        late.is_empty(),
        "{} late: {:?}",
        late.len(),
        &late[..late.len().min(10)]
    );

    phase("no plan was left alone for want of a lease while this orchestrator led");
    let starved: Vec<String> = o
        .engine
        .events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Decision && e.message.contains("left alone"))
        .map(|e| e.message)
        .collect();
    assert!(
        starved.is_empty(),
        "{} plans left alone, such as {:?}",
        starved.len(),
        &starved[..starved.len().min(5)]
    );
    assert!(o.node.status().leader.is_some());

    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
