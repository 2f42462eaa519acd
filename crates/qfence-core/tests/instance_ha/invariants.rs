//! One test per safety invariant of Instance HA: the seeded simulation, checked after every
//! decision (`check.rs`). `QFENCE_IHA_SCHEDULES=N` runs N schedules, `QFENCE_IHA_SEED=S`
//! replays one with its trace.

use crate::check::Invariant;
use crate::sim::run_invariant;

#[test]
fn invariant_g_evacuate_only_from_a_host_proven_fenced() {
    run_invariant(Invariant::EvacuateOnlyFenced);
}

#[test]
fn invariant_h_never_fenced_twice_in_one_incident() {
    run_invariant(Invariant::FencedOnce);
}

#[test]
fn invariant_i_at_most_the_cap_of_fences_a_cycle() {
    run_invariant(Invariant::CapPerCycle);
}

#[test]
fn invariant_j_nothing_through_a_closed_gate() {
    run_invariant(Invariant::GatesHold);
}

#[test]
fn invariant_k_re_enabled_only_after_its_evacuations() {
    run_invariant(Invariant::EnableAfterEvacuation);
}

#[test]
fn invariant_l_current_term_only() {
    run_invariant(Invariant::CurrentTermOnly);
}
