//! Every sentence qfence says about a plan is made here, so each decision has exactly one,
//! and they all speak alike: "no action: erp-db owned by dc1 at generation 7; dc2 fenced
//! (power.off FENCED at 14:02:07)".
//!
//! A decision's [`Reason`] is data: its [`Note`]s, one per clause, in order. The sentence is
//! their `Display`, rendered once; what a reader needs to know about a decision (whether it
//! says anything new, [`Reason::gist`]) is asked of the notes, never parsed back from the text.

use std::collections::BTreeSet;
use std::fmt;

use qfence_model::{Generation, PlanId, SiteId, Term, Verdict};

use crate::rules::{Basis, SiteVerdict};
use crate::state::{EvidenceKind, IntentKind, Stage, TransitionKind};
use crate::types::{BindingKey, Millis};

/// One clause of a decision's sentence. [`Note::render`] says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    UnknownPlan,
    NotLeader {
        term: Term,
    },
    LeaseExpired {
        term: Term,
        at: Millis,
    },
    IntentStale {
        intent: IntentKind,
        by: String,
        seen: Generation,
        now: Generation,
    },
    IntentRefused {
        intent: IntentKind,
        by: String,
        why: String,
    },
    Paused {
        by: String,
    },
    Resumed {
        by: String,
    },
    Confirmed {
        site: SiteId,
        by: String,
        why: String,
    },
    Retrying {
        by: String,
        stage: Stage,
    },
    Aborted {
        by: String,
        target: SiteId,
        stage: Stage,
        owner: SiteId,
        /// The fences undone at the old owner ("dc1 power.off"), and those left as they are.
        undone: String,
        left: String,
    },
    Steady {
        owner: SiteId,
        generation: Generation,
        paused: bool,
        sites: Vec<SiteVerdict>,
        /// The readiness watch's summary of each other site that has readiness bindings.
        ready: Vec<(SiteId, String)>,
        /// Sites in maintenance.
        maintenance: BTreeSet<SiteId>,
    },
    CheckingHealth {
        n: usize,
    },
    HealthGood,
    HealthBad {
        detail: String,
        since: Millis,
        failover_at: Millis,
    },
    Recovering {
        detail: String,
        n: u32,
        max: u32,
    },
    WouldFailOver {
        detail: String,
        why: String,
    },
    Starting {
        kind: TransitionKind,
        from: SiteId,
        target: SiteId,
    },
    RenewingDeadMan {
        until: Millis,
        /// Arming (no chain of proof stands), not renewing.
        arming: bool,
    },
    DeadManTrouble {
        site: SiteId,
        why: String,
        /// The chain of proof broke (arm again), rather than an answer being unknown.
        broken: bool,
    },
    /// A committed planned switchover left `site`'s copy stopped on a running host: its
    /// rejoin bindings run once, now (ADR 0023).
    Rejoining {
        site: SiteId,
        owner: SiteId,
        what: String,
    },
    /// An old owner waiting to rejoin is let rejoin: by an operator, or (`by: None`) by
    /// `rejoin: auto` once it answered again.
    RejoinLet {
        site: SiteId,
        by: Option<String>,
    },
    /// Old owners still waiting to rejoin (none of their rejoins under way), said after the
    /// steady clause so an operator sees what `qfence plan rejoin` is for.
    AwaitingRejoin {
        sites: Vec<SiteId>,
        owner: SiteId,
    },
    /// A rejoin of an old owner was read back done: a replica of the owner.
    Rejoined {
        site: SiteId,
        owner: SiteId,
    },
    ServiceElsewhere {
        what: String,
        detail: String,
        at: Millis,
        owner: SiteId,
        paused: bool,
    },
    ServiceRetry {
        why: String,
        target: SiteId,
        at: Millis,
        attempt: u32,
    },
    EvidenceContradicted {
        site: SiteId,
    },
    Shield {
        up: bool,
    },
    Halted {
        target: SiteId,
        stage: Stage,
        why: String,
    },
    Holding {
        target: SiteId,
        stage: Stage,
    },
    NewLeaderRepeats {
        term: Term,
        stage: Stage,
    },
    Retry {
        why: String,
        stage: Stage,
        at: Millis,
        attempt: u32,
        of: u32,
    },
    RetryWaiting {
        target: SiteId,
        stage: Stage,
        at: Millis,
    },
    Done {
        owner: SiteId,
        generation: Generation,
    },
    StepLimit,
    Reverify {
        stage: Stage,
        why: String,
    },
    WaitingBusy {
        binding: BindingKey,
        stage: Stage,
    },
    Step {
        stage: Stage,
        target: SiteId,
        what: String,
    },
    Committed {
        owner: SiteId,
        generation: Generation,
    },
    Waiting {
        stage: Stage,
        target: SiteId,
        waiting: usize,
        of: usize,
    },
    SwitchoverRefused {
        target: SiteId,
        why: String,
    },
    SecondaryFailed {
        what: String,
    },
    DeadManEvidence {
        site: SiteId,
        by: Millis,
    },
    WaitingDeadMan {
        site: SiteId,
        by: Millis,
        unproven: String,
    },
    /// A planned switchover committed on the resource-level proof: the sites it gave up had
    /// their resource stopped and were not powered off ("dc1 vm.stop FENCED at 14:02:07").
    ResourceStopped {
        what: String,
    },
    /// A planned switchover's resource-level proof did not come: it runs the required fences
    /// and verifies them as a failover does.
    Escalating {
        target: SiteId,
        why: String,
    },
}

fn intent_name(i: &IntentKind) -> String {
    match i {
        IntentKind::Failover { to } => format!("failover to {to}"),
        IntentKind::Switchover { to } => format!("switchover to {to}"),
        IntentKind::ConfirmFenced { site } => format!("confirm {site} fenced"),
        IntentKind::Pause => "pause".into(),
        IntentKind::Resume => "resume".into(),
        IntentKind::Retry => "retry".into(),
        IntentKind::Abort => "abort".into(),
        IntentKind::Rejoin { site } => format!("rejoin of {site}"),
    }
}

fn readings(v: &SiteVerdict) -> String {
    let r: Vec<String> = v
        .readings
        .iter()
        .map(|r| match r.at {
            Some(at) => format!("{} {} at {at}", r.capability, r.verdict),
            None => format!("{} never read", r.capability),
        })
        .collect();
    r.join(", ")
}

/// "dc2 fenced (power.off FENCED at 14:02:07)", "dc1 confirmed fenced by alice (...)".
pub(crate) fn site_summary(v: &SiteVerdict) -> String {
    match (&v.verdict, &v.basis) {
        (Verdict::Fenced, Basis::Evidence(EvidenceKind::OperatorConfirmed { by, why })) => {
            format!("{} confirmed fenced by {by} ({why})", v.site)
        }
        (Verdict::Fenced, Basis::Evidence(EvidenceKind::DeadManExpired { fired_by, .. })) => {
            format!(
                "{} fenced by its dead-man switch (fired by {fired_by})",
                v.site
            )
        }
        (Verdict::Fenced, Basis::ResourceStopped) => {
            format!("{} resource stopped ({})", v.site, readings(v))
        }
        (Verdict::Fenced, Basis::HotStandby { detail }) => {
            format!("{} standby ({})", v.site, standby_detail(v, detail))
        }
        (Verdict::Fenced, _) => format!("{} fenced ({})", v.site, readings(v)),
        _ => not_fenced(v),
    }
}

/// "dc1 not fenced (power.off FAILED at 14:02:07)".
pub(crate) fn not_fenced(v: &SiteVerdict) -> String {
    match &v.basis {
        Basis::NothingToProve => {
            format!(
                "{} not fenced (it has no required fence to prove it)",
                v.site
            )
        }
        Basis::NotAStandby { detail } => {
            format!(
                "{} not safe as a standby ({})",
                v.site,
                standby_detail(v, detail)
            )
        }
        _ => format!("{} not fenced ({})", v.site, readings(v)),
    }
}

/// "db.standby at 14:02:07: standby, replicating from 10.0.1.5:5432, lag 0 bytes": what a
/// hot standby's readings said (a standby reading proves nothing stopped, so no verdict word).
fn standby_detail(v: &SiteVerdict, detail: &str) -> String {
    let read: Vec<String> = v
        .readings
        .iter()
        .map(|r| match r.at {
            Some(at) => format!("{} at {at}", r.capability),
            None => format!("{} never read", r.capability),
        })
        .collect();
    if detail.is_empty() {
        read.join(", ")
    } else {
        format!("{}: {detail}", read.join(", "))
    }
}

/// "dc1's resource not proven stopped (vm.stop FAILED at 14:02:07)": a resource verdict
/// ([`crate::rules::Rules::resource_verdict`]) that is not FENCED.
pub(crate) fn not_stopped(v: &SiteVerdict) -> String {
    format!("{}'s resource not proven stopped ({})", v.site, readings(v))
}

impl Note {
    /// Routine: said every interval while nothing happens, so never news by itself (a
    /// steady plan's health checks go out and come back in turn).
    pub fn routine(&self) -> bool {
        matches!(self, Note::CheckingHealth { .. })
    }

    /// The clause, as it reads in the sentence about `plan`.
    pub fn render(&self, plan: &PlanId) -> String {
        render(plan, self)
    }
}

fn render(plan: &PlanId, n: &Note) -> String {
    // One function per kind of clause, so each reads on its own; the match here stays
    // exhaustive, so a new note must be placed in one.
    match n {
        Note::UnknownPlan
        | Note::NotLeader { .. }
        | Note::LeaseExpired { .. }
        | Note::IntentStale { .. }
        | Note::IntentRefused { .. }
        | Note::Paused { .. }
        | Note::Resumed { .. }
        | Note::Confirmed { .. }
        | Note::Retrying { .. }
        | Note::Aborted { .. } => render_gate(plan, n),
        Note::Steady { .. }
        | Note::CheckingHealth { .. }
        | Note::HealthGood
        | Note::HealthBad { .. }
        | Note::Recovering { .. }
        | Note::WouldFailOver { .. }
        | Note::RenewingDeadMan { .. }
        | Note::DeadManTrouble { .. }
        | Note::ServiceElsewhere { .. }
        | Note::Rejoining { .. }
        | Note::RejoinLet { .. }
        | Note::AwaitingRejoin { .. }
        | Note::Rejoined { .. }
        | Note::ServiceRetry { .. }
        | Note::EvidenceContradicted { .. } => render_steady(plan, n),
        Note::Starting { .. }
        | Note::Shield { .. }
        | Note::Halted { .. }
        | Note::Holding { .. }
        | Note::NewLeaderRepeats { .. }
        | Note::Retry { .. }
        | Note::RetryWaiting { .. }
        | Note::Done { .. }
        | Note::StepLimit
        | Note::Reverify { .. }
        | Note::WaitingBusy { .. }
        | Note::Step { .. }
        | Note::Committed { .. }
        | Note::Waiting { .. }
        | Note::SwitchoverRefused { .. }
        | Note::SecondaryFailed { .. }
        | Note::DeadManEvidence { .. }
        | Note::WaitingDeadMan { .. }
        | Note::ResourceStopped { .. }
        | Note::Escalating { .. } => render_transition(plan, n),
    }
}

/// Clauses about whether the plan is acted on at all (leadership, the lease) and about the
/// operators' intents.
fn render_gate(plan: &PlanId, n: &Note) -> String {
    match n {
        Note::UnknownPlan => format!("{plan} is not in the configuration"),
        Note::NotLeader { term } => {
            format!("not the leader (term {term}), so {plan} is left alone")
        }
        Note::LeaseExpired { term, at } => {
            format!("the leader's lease (term {term}) ran out at {at}, so {plan} is left alone")
        }
        Note::IntentStale {
            intent,
            by,
            seen,
            now,
        } => format!(
            "refused {by}'s {} for {plan}: it was made at generation {seen}, the plan is at {now}",
            intent_name(intent)
        ),
        Note::IntentRefused { intent, by, why } => {
            format!("refused {by}'s {} for {plan}: {why}", intent_name(intent))
        }
        Note::Paused { by } => format!("{plan} paused by {by}"),
        Note::Resumed { by } => format!("{plan} resumed by {by}"),
        Note::Confirmed { site, by, why } => {
            format!("{by} confirmed {site} fenced for {plan} ({why})")
        }
        Note::Retrying { by, stage } => format!("{by} retries {plan}'s {} step", stage.as_str()),
        Note::Aborted {
            by,
            target,
            stage,
            owner,
            undone,
            left,
        } => {
            let mut s = format!(
                "{by} aborted {plan}'s move to {target} at its {} step; {owner} owns it",
                stage.as_str()
            );
            if !undone.is_empty() {
                s.push_str(&format!(", undoing this move's fences there ({undone})"));
            }
            if !left.is_empty() {
                s.push_str(&format!(", not undone: {left}"));
            }
            s
        }
        _ => unreachable!("render sends only gate notes here"),
    }
}

/// Clauses about a plan at rest at its owner: its sites, its health, its dead-man switch, its
/// service pointer.
fn render_steady(plan: &PlanId, n: &Note) -> String {
    match n {
        Note::Steady {
            owner,
            generation,
            paused,
            sites,
            ready,
            maintenance,
        } => {
            let mut s = format!("{plan} owned by {owner} at generation {generation}");
            if *paused {
                s.push_str(" (paused)");
            }
            for v in sites {
                s.push_str("; ");
                let summary = site_summary(v);
                if maintenance.contains(&v.site) {
                    // "dc2 in maintenance, not fenced (...)": shown, raising nothing.
                    let rest = summary
                        .strip_prefix(v.site.as_str())
                        .map_or(summary.as_str(), str::trim_start);
                    s.push_str(&format!("{} in maintenance, {rest}", v.site));
                } else {
                    s.push_str(&summary);
                }
                if let Some((_, r)) = ready.iter().find(|(site, _)| *site == v.site) {
                    s.push_str(", ");
                    s.push_str(r);
                }
            }
            s
        }
        Note::CheckingHealth { n } => format!("checking health ({n} check{})", plural(*n)),
        Note::HealthGood => "health is good again".into(),
        Note::HealthBad {
            detail,
            since,
            failover_at,
        } => {
            format!("health bad since {since} ({detail}); failover due at {failover_at}")
        }
        Note::Recovering { detail, n, max } => {
            format!("restarting {plan} in place ({detail}; recovery {n} of {max})")
        }
        Note::WouldFailOver { detail, why } => {
            format!("{plan} should fail over ({detail}) but {why}")
        }
        Note::RenewingDeadMan {
            until,
            arming: false,
        } => format!("renewing the dead-man switch until {until}"),
        Note::RenewingDeadMan {
            until,
            arming: true,
        } => format!("arming the dead-man switch until {until}"),
        Note::DeadManTrouble { site, why, broken } => format!(
            "{site}'s dead-man switch is not confirmed armed ({why}){}",
            if *broken {
                ": it proves nothing until it is armed again"
            } else {
                ""
            }
        ),
        Note::ServiceElsewhere {
            what,
            detail,
            at,
            owner,
            paused,
        } => {
            if *paused {
                format!(
                    "{what} points away from {owner} ({detail} at {at}); paused, so it is left \
                     as it is"
                )
            } else {
                format!("{what} points away from {owner} ({detail} at {at}): pointing it back")
            }
        }
        Note::Rejoining { site, owner, what } => {
            format!("rejoining {site} as a replica of {owner} ({what})")
        }
        Note::RejoinLet { site, by: Some(by) } => format!("{by} lets {site} rejoin {plan}"),
        Note::RejoinLet { site, by: None } => {
            format!("{site} answers again: {plan} rejoins it (rejoin: auto)")
        }
        Note::AwaitingRejoin { sites, owner } => {
            let names: Vec<&str> = sites.iter().map(SiteId::as_str).collect();
            let (verb, what, site) = match names.as_slice() {
                [one] => ("waits", "a replica", *one),
                _ => ("wait", "replicas", "SITE"),
            };
            format!(
                "{} {verb} to rejoin as {what} of {owner} (qfence plan rejoin {plan} {site})",
                names.join(", ")
            )
        }
        Note::Rejoined { site, owner } => {
            format!("{site} rejoined {plan} as a replica of {owner}")
        }
        Note::ServiceRetry {
            why,
            target,
            at,
            attempt,
        } => format!(
            "{why}: the service does not point at the owner {target} yet; the service step is \
             retried at {at} (attempt {attempt}) until it does"
        ),
        Note::EvidenceContradicted { site } => {
            format!("{site} reads FAILED: its fence evidence no longer stands")
        }
        _ => unreachable!("render sends only steady notes here"),
    }
}

/// Clauses about a move in progress, step by step, and how it ends.
fn render_transition(plan: &PlanId, n: &Note) -> String {
    match n {
        Note::Starting { kind, from, target } => match kind {
            TransitionKind::Failover { cause } => {
                format!("failing {plan} over from {from} to {target}: {cause}")
            }
            TransitionKind::OperatorFailover { by, why } => {
                format!("{by} fails {plan} over from {from} to {target} ({why})")
            }
            TransitionKind::Switchover { by, why } => {
                format!("{by} switches {plan} over from {from} to {target} ({why})")
            }
        },
        Note::Shield { up: true } => "raising the shield".into(),
        Note::Shield { up: false } => "lowering the shield".into(),
        Note::Halted { target, stage, why } => format!(
            "{plan}'s move to {target} stopped at its {} step: {why}",
            stage.as_str()
        ),
        Note::Holding { target, stage } => format!(
            "{plan} is paused in its move to {target} at the {} step",
            stage.as_str()
        ),
        Note::NewLeaderRepeats { term, stage } => {
            format!(
                "new leader (term {term}) repeats the {} step",
                stage.as_str()
            )
        }
        Note::Retry {
            why,
            stage,
            at,
            attempt,
            of,
        } => format!(
            "{why}: {} again at {at} (attempt {attempt} of {of})",
            stage.as_str()
        ),
        Note::RetryWaiting { target, stage, at } => format!(
            "{plan} to {target}: {} step to be retried at {at}",
            stage.as_str()
        ),
        Note::Done { owner, generation } => {
            format!("{plan} now served by {owner} at generation {generation}")
        }
        Note::StepLimit => "more steps next time".into(),
        Note::Reverify { stage, why } => {
            format!(
                "before the {} step, reading fences back again: {why}",
                stage.as_str()
            )
        }
        Note::WaitingBusy { binding, stage } => format!(
            "waiting for the operation on {binding} before the {} step",
            stage.as_str()
        ),
        Note::Step {
            stage,
            target,
            what,
        } => {
            format!("{plan} to {target}, {} step: {what}", stage.as_str())
        }
        Note::Committed { owner, generation } => {
            format!("committed {plan} to {owner} at generation {generation}")
        }
        Note::Waiting {
            stage,
            target,
            waiting,
            of,
        } => format!(
            "{plan} to {target}, {} step: waiting for {waiting} of {of} operation{}",
            stage.as_str(),
            plural(*of)
        ),
        Note::SwitchoverRefused { target, why } => {
            format!("switchover of {plan} to {target} refused, nothing touched: {why}")
        }
        Note::SecondaryFailed { what } => format!("secondary fences did not take ({what})"),
        Note::DeadManEvidence { site, by } => {
            format!("{site} counts as fenced: its dead-man switch fired by {by}")
        }
        Note::WaitingDeadMan { site, by, unproven } => {
            format!("{unproven}; waiting for {site}'s dead-man switch to fire by {by}")
        }
        Note::ResourceStopped { what } => {
            format!("the switchover stopped the resource ({what}) and did not power the site off")
        }
        Note::Escalating { target, why } => format!(
            "{plan} to {target}: {why}: escalating to the required fences, verified as in a \
             failover"
        ),
        _ => unreachable!("render sends only transition notes here"),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The decision's one sentence: its clauses in order, "no action: " first when nothing is done.
fn sentence(plan: &PlanId, notes: &[Note], acted: bool) -> String {
    let body = body(plan, notes);
    if acted {
        body
    } else {
        format!("no action: {body}")
    }
}

fn body(plan: &PlanId, notes: &[Note]) -> String {
    let body: Vec<String> = notes.iter().map(|n| render(plan, n)).collect();
    if body.is_empty() {
        format!("{plan}: nothing to report")
    } else {
        body.join("; ")
    }
}

/// Why a decision is what it is: its notes, in order, and whether it acted. It reads as its
/// one sentence (`Display`, `as_str`, and a `&str` through `Deref`), which is also its
/// serialised form, so the event log and the API show the sentence.
#[derive(Clone, PartialEq, Eq)]
pub struct Reason {
    plan: PlanId,
    notes: Vec<Note>,
    acted: bool,
    sentence: String,
}

impl Reason {
    /// The reason for a decision about `plan` that says `notes` and acted (changed the state
    /// or issued commands) or not.
    pub fn new(plan: &PlanId, notes: Vec<Note>, acted: bool) -> Self {
        let sentence = sentence(plan, &notes, acted);
        Self {
            plan: plan.clone(),
            notes,
            acted,
            sentence,
        }
    }

    /// The clauses, in order.
    pub fn notes(&self) -> &[Note] {
        &self.notes
    }

    /// Whether the decision acted: false is the sentence's "no action: " opening.
    pub fn acted(&self) -> bool {
        self.acted
    }

    /// The sentence.
    pub fn as_str(&self) -> &str {
        &self.sentence
    }

    /// What the sentence says once routine wording is set aside: without the "no action: "
    /// opening and without a routine first clause ([`Note::routine`]) when more follow, since
    /// a steady plan alternates between the two every interval and neither is news. Two
    /// decisions with the same gist (times of day aside) say nothing new one after the other.
    pub fn gist(&self) -> String {
        let notes = match self.notes.split_first() {
            Some((first, rest)) if first.routine() && !rest.is_empty() => rest,
            _ => &self.notes[..],
        };
        body(&self.plan, notes)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sentence)
    }
}

impl fmt::Debug for Reason {
    /// The sentence, quoted: what a failing test should show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.sentence, f)
    }
}

impl std::ops::Deref for Reason {
    type Target = str;

    fn deref(&self) -> &str {
        &self.sentence
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.sentence == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.sentence == *other
    }
}

impl PartialEq<String> for Reason {
    fn eq(&self, other: &String) -> bool {
        self.sentence == *other
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.sentence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> PlanId {
        PlanId::new("erp-db").unwrap()
    }

    fn site(s: &str) -> SiteId {
        SiteId::new(s).unwrap()
    }

    fn steady() -> Note {
        Note::Steady {
            owner: site("dc2"),
            generation: Generation(2),
            paused: false,
            sites: Vec::new(),
            ready: Vec::new(),
            maintenance: BTreeSet::new(),
        }
    }

    #[test]
    fn routine_checks_and_no_action_openings_are_not_news() {
        let checking = Reason::new(&plan(), vec![Note::CheckingHealth { n: 1 }, steady()], true);
        let quiet = Reason::new(&plan(), vec![steady()], false);
        assert_eq!(
            checking,
            "checking health (1 check); erp-db owned by dc2 at generation 2"
        );
        assert_eq!(quiet, "no action: erp-db owned by dc2 at generation 2");
        assert_eq!(checking.gist(), quiet.gist());
        assert_eq!(quiet.gist(), "erp-db owned by dc2 at generation 2");
        let paused = Reason::new(&plan(), vec![Note::Paused { by: "alice".into() }], true);
        assert_ne!(paused.gist(), quiet.gist());
        assert_eq!(paused.gist(), paused.as_str());
        // Alone, the routine clause is all there is to say.
        let alone = Reason::new(&plan(), vec![Note::CheckingHealth { n: 2 }], true);
        assert_eq!(alone.gist(), "checking health (2 checks)");
    }

    #[test]
    fn a_reason_serialises_as_its_sentence() {
        let r = Reason::new(&plan(), vec![steady()], false);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!("no action: erp-db owned by dc2 at generation 2")
        );
    }
}
