use qfence_core::{BindingKey, Observation};
use qfence_model::Verdict;

use super::*;

/// Between two decisions the status shows what the last one judged, beside its sentence:
/// judged again at the request's `now`, a reading that aged out meanwhile read UNKNOWN
/// beside "dc2 fenced (...)".
#[test]
fn the_status_shows_the_last_decisions_verdicts_beside_its_sentence() {
    use qfence_core::{Leadership, Observed};
    use qfence_model::{SiteId, Term};
    let loaded =
        qfence_model::config::load_str(include_str!("../../../../examples/lab.yaml"), "lab.yaml")
            .expect("the lab configuration validates");
    let config = loaded.config;
    let plan = config.plan("erp-db").expect("erp-db");
    let state = PlanState::initial(plan);
    let dc2 = SiteId::new("dc2").unwrap();
    let t0 = Millis(1_700_000_000_000);
    let mut view = PlanRuntime::default();
    view.observations.insert(
        BindingKey::site_at(plan, &dc2, 0),
        Observation::new(Observed::Holds, t0),
    );
    let at = |secs| t0.plus(Duration::from_secs(secs));
    // Just inside and just past the plan's freshness (40 s for the lab: the fence timeout
    // plus an interval).
    let fresh_for = plan.freshness.as_secs();
    let (inside, past) = (fresh_for - 1, fresh_for + 1);
    // Before any decision, the status judges its observations now.
    let fresh = site_verdicts(&config, plan, &state, &view, at(inside));
    assert_eq!(fresh[1].verdict, Verdict::Fenced);
    let decision = decide(&Snapshot {
        config: &config,
        plan: PlanId::new("erp-db").unwrap(),
        state: &state,
        observations: &view.observations,
        results: &view.results,
        in_flight: &view.in_flight,
        leadership: Leadership {
            leader: true,
            term: Term(1),
            lease_until: at(past + 10),
        },
        now: at(inside),
    });
    assert!(
        decision.reason.contains("dc2 fenced (power.off FENCED"),
        "{}",
        decision.reason
    );
    view.last_reason = Some(decision.reason.to_string());
    view.last_sites = decision.sites;
    // Two seconds on, the reading is past freshness; the sentence still says fenced until
    // the next decision, and so does the status.
    let shown = site_verdicts(&config, plan, &state, &view, at(past));
    assert_eq!(shown[1].site, dc2);
    assert_eq!(shown[1].verdict, Verdict::Fenced, "{}", decision.reason);
    assert_eq!(shown[1].checked_at_ms, Some(t0.0));
    // The owner dc1 was never read: UNKNOWN, not FENCED.
    assert_eq!(shown[0].verdict, Verdict::Unknown);
    view.last_sites.clear();
    view.last_reason = None;
    let judged_now = site_verdicts(&config, plan, &state, &view, at(past));
    assert_eq!(judged_now[1].verdict, Verdict::Unknown);
}

#[test]
fn times_of_day_are_masked_and_nothing_else() {
    assert_eq!(
        without_times("dc2 fenced (power.off FENCED at 14:02:07); due at 09:00:00"),
        "dc2 fenced (power.off FENCED at --:--:--); due at --:--:--"
    );
    assert_eq!(
        without_times("g12 t3 12:3:45 1:02:03x"),
        "g12 t3 12:3:45 1:02:03x"
    );
    assert_eq!(without_times("é 10:11:12"), "é --:--:--");
}

#[tokio::test(start_paused = true)]
async fn the_clock_moves_with_tokio_time() {
    let c = crate::Clock::starting_at(qfence_core::Millis(1_000));
    assert_eq!(c.now(), qfence_core::Millis(1_000));
    tokio::time::sleep(Duration::from_secs(90)).await;
    assert_eq!(c.now(), qfence_core::Millis(91_000));
    assert_eq!(
        c.after(Duration::from_millis(5)),
        qfence_core::Millis(91_005)
    );
}
