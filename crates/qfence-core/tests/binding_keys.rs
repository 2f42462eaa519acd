//! Bindings are keyed by their stable id, not their place in the list (issue 13): a plan
//! edited so that a binding is inserted before another keeps each reading with its own
//! binding, and the verdict it supports does not move.

mod bench;
mod sim;

use qfence_core::{BindingKey, Observed};
use qfence_model::{Role, Verdict};
use sim::fixtures::{self, bind, site};

use bench::*;

fn verdict_of(d: &qfence_core::Decision, s: &str) -> Verdict {
    d.sites
        .iter()
        .find(|v| v.site.as_str() == s)
        .map(|v| v.verdict)
        .unwrap_or_else(|| panic!("no verdict for {s}: {:?}", d.sites))
}

#[test]
fn a_binding_inserted_before_a_fence_does_not_take_its_reading() {
    // Derived ids, as a configuration file without `id:` keys has.
    let mut b = Bench::lab();
    b.cfg = fixtures::config_derived(vec![("erp-db", fixtures::erp_plan())]);
    let fence = BindingKey::site_at(b.plan(), &site("dc2"), 0);
    for _ in 0..3 {
        b.step();
    }
    let before = b.decide();
    assert_eq!(
        verdict_of(&before, "dc2"),
        Verdict::Fenced,
        "{}",
        before.reason
    );
    let read = b.obs[&fence].clone();
    assert_eq!(read.value, Observed::Holds);

    // The edit: a health check of another VM goes in front of dc2's power fence.
    let mut edited = fixtures::erp_plan();
    edited.instances.get_mut(&site("dc2")).unwrap().insert(
        0,
        bind("pve-dc2", "vm.status", "pve-dc2-01/102", Role::Health),
    );
    b.cfg = fixtures::config_derived(vec![("erp-db", edited)]);
    let inserted = BindingKey::site_at(b.plan(), &site("dc2"), 0);
    let moved = BindingKey::site_at(b.plan(), &site("dc2"), 1);
    assert_ne!(inserted, fence, "the new first binding is another key");
    assert_eq!(moved, fence, "the fence keeps its key at its new place");

    let after = b.decide();
    assert_eq!(
        verdict_of(&after, "dc2"),
        Verdict::Fenced,
        "{}",
        after.reason
    );
    let dc2 = after
        .sites
        .iter()
        .find(|v| v.site.as_str() == "dc2")
        .unwrap();
    assert_eq!(
        dc2.readings
            .iter()
            .map(|r| (&r.binding, r.at))
            .collect::<Vec<_>>(),
        vec![(&fence, Some(read.at))],
        "the verdict rests on the fence's own reading"
    );
    // What the sentence and the events show is the fence's place in the new list.
    assert_eq!(moved.to_string(), "dc2[1]");
}
