//! Evacuating a fenced host's servers (steps 8, 11 and 12 of the seed): each one locked,
//! evacuated, and, with smart evacuation, followed to the end of its migration and retried;
//! at most `workers` at once across the cloud; only while the host's fence reads back off,
//! fresh, and no gate is closed. Then the host goes on to its power-on, or is left for an
//! operator.

use qfence_model::Generation;
use qfence_model::config::HostName;

use super::reason::Note;
use super::snapshot::ServerId;
use super::state::{EvacState, Evacuation, Halt, HostPhase, LeftWhy, LockState};
use super::types::{Action, EventKind, LOCK_REASON, Target, operator_steps};
use super::{Cx, Mutation, Settled};
use crate::types::{Observed, Outcome};

/// Nova's `task_state` of a server while an evacuation rebuilds it.
const REBUILDING: &str = "rebuilding";

/// What the host's latest fence reading says, for its evacuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    /// Off, read in this incident, no older than two polls.
    Fresh,
    /// Too old or unreadable: read again before evacuating more.
    Stale,
    /// Read on after it was proven off: someone powered it on.
    Contradicted,
}

impl Cx<'_, '_> {
    fn proof(&self, host: &HostName) -> Proof {
        let r = self.record(host);
        let (Some(started), Some(proven)) = (r.fence.started, r.fence.proven) else {
            return Proof::Stale;
        };
        let Some(o) = self.s.fences.get(host).filter(|o| o.at >= started) else {
            return Proof::Stale;
        };
        match o.value {
            Observed::NotHeld if o.at > proven => Proof::Contradicted,
            Observed::Holds if self.now().since(o.at) <= self.cloud.poll * 2 => Proof::Fresh,
            Observed::Unknown if self.mutation() == Mutation::UnknownFenceIsProof => Proof::Fresh,
            _ => Proof::Stale,
        }
    }

    /// Evacuations under way across the cloud: sent and not answered, or followed, by hosts
    /// still evacuating (a host given up no longer follows its own).
    fn evacuations_running(&self) -> usize {
        self.state
            .hosts
            .values()
            .filter(|r| r.phase == HostPhase::Evacuating)
            .flat_map(|r| r.servers.values())
            .filter(|e| {
                matches!(
                    e.state,
                    EvacState::Requested { .. } | EvacState::Following { .. }
                )
            })
            .count()
    }

    /// Nova's evacuations of this incident's servers from the host still under way (neither
    /// succeeded nor failed). The host's nova-compute, started again, marks every record from
    /// it that is accepted, pre-migrating or done as completed; one still under way then ends
    /// `done`, and Nova refuses to clear forced-down until nova-compute restarts again.
    fn nova_evacuating(&self, host: &HostName) -> usize {
        let r = self.record(host);
        self.s
            .nova
            .migrations
            .iter()
            .filter(|m| {
                m.source == *host
                    && m.created_at >= r.detected
                    && r.servers.contains_key(&m.server)
                    && !m.status.succeeded()
                    && !m.status.failed()
            })
            .count()
    }

    /// The servers to evacuate, added as they are seen on the host.
    fn capture(&mut self, host: &HostName) {
        let tags = self.server_tags_in_use();
        let new: Vec<ServerId> = self
            .s
            .nova
            .servers_on(host)
            .filter(|s| self.server_evacuable(s, tags))
            .filter(|s| !self.record(host).servers.contains_key(&s.id))
            .map(|s| s.id.clone())
            .collect();
        for id in new {
            self.rec(host).servers.insert(id, Evacuation::new());
        }
    }

    pub(super) fn evacuating(&mut self, host: &HostName) {
        let first = self.record(host).servers.is_empty();
        self.capture(host);
        if first {
            let servers = self.record(host).servers.len();
            self.event(Some(host), EventKind::EvacuationStarted { servers });
        }
        let proof = self.proof(host);
        if proof == Proof::Contradicted {
            self.notes
                .push(Note::PoweredOnWhileEvacuated { host: host.clone() });
            self.event(Some(host), EventKind::PoweredOnWhileEvacuated);
            self.set_phase(
                host,
                HostPhase::Halted {
                    why: Halt::PoweredOnWhileEvacuated,
                },
            );
            return;
        }
        // The fence watch: read it again once a poll old, so the proof stays fresh.
        let old = self
            .s
            .fences
            .get(host)
            .is_none_or(|o| self.now().since(o.at) >= self.cloud.poll);
        if old
            && !self.busy(&Target::Fence(host.clone()))
            && let Ok(fence) = self.s.config.host_fence(self.cloud, host)
        {
            let incident = Some(self.record(host).incident);
            self.issue(
                Action::CheckFence {
                    host: host.clone(),
                    binding: fence.binding,
                },
                incident,
            );
        }
        let site = self.site_of.get(host).cloned();
        let gate = self.gates.closed_for(host, site.as_ref());
        let may = proof == Proof::Fresh && gate.is_none();
        let ids: Vec<ServerId> = self.record(host).servers.keys().cloned().collect();
        let mut issued = 0;
        for id in &ids {
            if self.server(host, id, may, &mut issued) {
                return;
            }
        }
        if proof != Proof::Fresh {
            self.notes.push(Note::WaitingProof { host: host.clone() });
        }
        if let Some(c) = &gate {
            self.notes.push(Note::blocked(vec![host.clone()], c));
        }
        let r = self.record(host);
        let count = |f: fn(&Evacuation) -> bool| r.servers.values().filter(|e| f(e)).count();
        let done = count(|e| matches!(e.state, EvacState::Done { .. }));
        let running = count(|e| {
            matches!(
                e.state,
                EvacState::Requested { .. } | EvacState::Following { .. }
            )
        });
        let left = count(|e| e.state == EvacState::Pending);
        let finished = r.servers.values().all(|e| {
            e.ended()
                && !matches!(
                    e.lock,
                    LockState::Locked | LockState::Locking { .. } | LockState::Unlocking { .. }
                )
        });
        if finished {
            return self.evacuations_ended(host);
        }
        self.notes.push(Note::Evacuating {
            host: host.clone(),
            issued,
            running: running.saturating_sub(issued),
            done,
            left,
        });
    }

    /// One server's step. Returns true when the host was given up.
    fn server(&mut self, host: &HostName, id: &ServerId, may: bool, issued: &mut usize) -> bool {
        if !self.settle_lock(host, id) {
            return false;
        }
        let target = Target::Server(id.clone());
        let incident = Some(self.record(host).incident);
        let nova = self.s.nova;
        let ev = self.record(host).servers[id].clone();
        match ev.state {
            EvacState::Done { .. } | EvacState::Unsuccessful => {}
            EvacState::Pending => {
                let srv = nova.server(id);
                // An earlier request's answer was lost: it may have left already.
                if srv.is_none() || (ev.requests > 0 && srv.is_some_and(|s| s.host != *host)) {
                    let now = self.now();
                    self.evac(host, id).state = EvacState::Done { at: now };
                    return false;
                }
                // An earlier request's answer was lost and Nova is still rebuilding it: that
                // request was accepted. Asking again would be refused (409), and a refusal is
                // not a failed evacuation; the next poll shows where it went.
                if ev.requests > 0
                    && srv.is_some_and(|s| s.task_state.as_deref() == Some(REBUILDING))
                {
                    return false;
                }
                if !may || self.busy(&target) {
                    return false;
                }
                if ev.lock == LockState::Unlocked {
                    let op = self.issue(
                        Action::Lock {
                            server: id.clone(),
                            reason: LOCK_REASON.to_owned(),
                        },
                        incident,
                    );
                    self.evac(host, id).lock = LockState::Locking { op };
                    return false;
                }
                if self.evacuations_running() >= self.cloud.workers as usize {
                    return false;
                }
                let to = if self.cloud.evacuate_to_reserved {
                    self.record(host).reserved.clone()
                } else {
                    None
                };
                let after = nova
                    .migrations
                    .iter()
                    .filter(|m| &m.server == id)
                    .map(|m| m.id)
                    .max()
                    .unwrap_or(0);
                let op = self.issue(
                    Action::Evacuate {
                        server: id.clone(),
                        from: host.clone(),
                        to,
                    },
                    incident,
                );
                let now = self.now();
                let e = self.evac(host, id);
                e.state = EvacState::Requested { op, at: now, after };
                e.requests += 1;
                *issued += 1;
            }
            EvacState::Requested { op, at, after } => match self.settled(&op) {
                Settled::Running => {}
                Settled::Ended(Outcome::Done) if !self.cloud.smart_evacuation => {
                    let now = self.now();
                    self.evac(host, id).state = EvacState::Done { at: now };
                }
                Settled::Ended(Outcome::Done | Outcome::Unknown) if self.cloud.smart_evacuation => {
                    self.evac(host, id).state = EvacState::Following { since: at, after };
                    // Read it now if due: no result may wake the loop before its next poll.
                    self.follow(id, incident);
                }
                Settled::Ended(Outcome::Unknown) => {
                    let retry = ev.requests < self.cloud.evacuation_retries;
                    self.evac(host, id).state = if retry {
                        EvacState::Pending
                    } else {
                        EvacState::Unsuccessful
                    };
                }
                Settled::Ended(_) => return self.evacuation_failed(host, id),
            },
            EvacState::Following { since, after } => {
                let latest = nova
                    .migrations
                    .iter()
                    .filter(|m| &m.server == id && m.id > after)
                    .max_by_key(|m| m.id);
                if latest.is_some_and(|m| m.status.succeeded()) {
                    let now = self.now();
                    self.evac(host, id).state = EvacState::Done { at: now };
                } else if latest.is_some_and(|m| m.status.failed())
                    || self.now().since(since) > self.cloud.evacuation_timeout
                {
                    return self.evacuation_failed(host, id);
                } else {
                    self.follow(id, incident);
                }
            }
        }
        // Ended, at once or just now: its lock goes.
        let ev = &self.record(host).servers[id];
        if ev.ended() && ev.lock == LockState::Locked && !self.busy(&target) {
            let op = self.issue(Action::Unlock { server: id.clone() }, incident);
            self.evac(host, id).lock = LockState::Unlocking { op };
        }
        false
    }

    /// Reads a followed server's evacuation records when `evacuation_poll` has passed since
    /// they were last read (by a poll or by such a read) and no read of them runs.
    fn follow(&mut self, id: &ServerId, incident: Option<Generation>) {
        let nova = self.s.nova;
        let read = nova
            .migrations_read_at
            .get(id)
            .copied()
            .unwrap_or(nova.read_at)
            .max(nova.read_at);
        let follow = Target::Migrations(id.clone());
        if self.now().since(read) >= self.cloud.evacuation_poll && !self.busy(&follow) {
            self.issue(Action::FollowMigration { server: id.clone() }, incident);
        }
    }

    /// Judges the server's lock or unlock, once ended. False while it runs.
    fn settle_lock(&mut self, host: &HostName, id: &ServerId) -> bool {
        let (op, locking) = match &self.record(host).servers[id].lock {
            LockState::Locking { op } => (op.clone(), true),
            LockState::Unlocking { op } => (op.clone(), false),
            _ => return true,
        };
        let Settled::Ended(o) = self.settled(&op) else {
            return false;
        };
        // A lock whose answer was lost may hold: it is unlocked like one that does.
        self.evac(host, id).lock = match (locking, o) {
            (true, Outcome::Failed) => LockState::Skipped,
            (true, _) => LockState::Locked,
            (false, Outcome::Done) => LockState::Unlocked,
            (false, _) => LockState::Locked,
        };
        true
    }

    fn evac(&mut self, host: &HostName, id: &ServerId) -> &mut Evacuation {
        self.rec(host)
            .servers
            .get_mut(id)
            .expect("a server of the record")
    }

    /// One failure of a server's evacuation. Smart evacuation retries it, and gives the host
    /// up after `evacuation_retries` failures; otherwise it is unsuccessful. True when the
    /// host was given up.
    fn evacuation_failed(&mut self, host: &HostName, id: &ServerId) -> bool {
        let of = self.cloud.evacuation_retries;
        let smart = self.cloud.smart_evacuation;
        let e = self.evac(host, id);
        e.failures += 1;
        let failures = e.failures;
        self.notes.push(Note::EvacuationFailed {
            host: host.clone(),
            server: id.clone(),
            failures,
            of,
        });
        self.event(
            Some(host),
            EventKind::EvacuationFailed {
                server: id.clone(),
                failures,
                of,
            },
        );
        if !smart {
            self.evac(host, id).state = EvacState::Unsuccessful;
            return false;
        }
        if failures < of {
            self.evac(host, id).state = EvacState::Pending;
            return false;
        }
        if self.cloud.force_enable && self.mutation() == Mutation::ForceEnableAfterSmartFailure {
            self.evac(host, id).state = EvacState::Unsuccessful;
            return false;
        }
        self.evac(host, id).state = EvacState::Unsuccessful;
        self.notes.push(Note::GaveUp {
            host: host.clone(),
            server: id.clone(),
        });
        self.event(
            Some(host),
            EventKind::SmartEvacuationFailed {
                server: id.clone(),
                steps: operator_steps(host, id),
            },
        );
        self.set_phase(
            host,
            HostPhase::Halted {
                why: Halt::SmartEvacuationFailed { server: id.clone() },
            },
        );
        true
    }

    /// Every server ended: on to steps 9 and 12 once a poll shows Nova's evacuations from the
    /// host ended too (at most `evacuation_timeout` after they began).
    fn evacuations_ended(&mut self, host: &HostName) {
        let r = self.record(host);
        // Without smart evacuation, one is done once Nova accepted it: a poll since then
        // shows its record, and whether it is still under way.
        let last = r
            .servers
            .values()
            .filter_map(|e| match e.state {
                EvacState::Done { at } => Some(at),
                _ => None,
            })
            .max();
        let seen = self.cloud.smart_evacuation || last.is_none_or(|t| self.s.nova.read_at > t);
        let waited = self.now().since(r.phase_since) > self.cloud.evacuation_timeout;
        let under_way = self.nova_evacuating(host);
        if waited || (seen && under_way == 0) {
            return self.evacuated(host);
        }
        let what = if seen {
            format!("waiting for Nova to finish {under_way} evacuation(s) before it is powered on")
        } else {
            "waiting for a poll of Nova to show its evacuations".to_owned()
        };
        self.notes.push(Note::Waiting {
            host: host.clone(),
            what,
        });
    }

    /// Every server ended: steps 9 and 12.
    fn evacuated(&mut self, host: &HostName) {
        let r = self.record(host);
        let done = r
            .servers
            .values()
            .filter(|e| matches!(e.state, EvacState::Done { .. }))
            .count();
        let unsuccessful = r.servers.len() - done;
        self.notes.push(Note::Evacuated {
            host: host.clone(),
            done,
            unsuccessful,
        });
        self.event(Some(host), EventKind::Evacuated { done, unsuccessful });
        if unsuccessful > 0 && !self.cloud.force_enable {
            self.leave_disabled(host, LeftWhy::Unsuccessful);
        } else if self.cloud.leave_disabled {
            self.leave_disabled(host, LeftWhy::Asked);
        } else {
            self.set_phase(host, HostPhase::PoweringOn);
            self.powering_on(host);
        }
    }

    /// A held host's servers: every qfence lock released.
    pub(super) fn unlock_all(&mut self, host: &HostName) {
        let ids: Vec<ServerId> = self.record(host).servers.keys().cloned().collect();
        for id in ids {
            if !self.settle_lock(host, &id) {
                continue;
            }
            let ev = self.record(host).servers[&id].clone();
            if ev.lock == LockState::Locked && !self.busy(&Target::Server(id.clone())) {
                let incident = Some(self.record(host).incident);
                let op = self.issue(Action::Unlock { server: id.clone() }, incident);
                self.evac(host, &id).lock = LockState::Unlocking { op };
            }
        }
    }

    /// Servers locked with qfence's reason that no open incident holds (a record closed while
    /// an unlock was lost, a qfence that lost its state): unlocked, once a poll.
    pub(super) fn release_leftover_locks(&mut self) {
        let nova = self.s.nova;
        // A record's own servers are its business: it unlocks them itself.
        let held: Vec<&ServerId> = self
            .state
            .hosts
            .values()
            .flat_map(|r| r.servers.keys())
            .collect();
        let leftover: Vec<ServerId> = nova
            .servers
            .iter()
            .filter(|s| s.locked && s.locked_reason.as_deref() == Some(LOCK_REASON))
            .filter(|s| !held.contains(&&s.id))
            .filter(|s| {
                self.state
                    .released
                    .get(&s.id)
                    .is_none_or(|t| *t < nova.read_at)
            })
            .map(|s| s.id.clone())
            .collect();
        let gone: Vec<ServerId> = self
            .state
            .released
            .keys()
            .filter(|id| !nova.server(id).is_some_and(|s| s.locked))
            .cloned()
            .collect();
        for id in gone {
            self.change().released.remove(&id);
        }
        let mut n = 0;
        for id in leftover {
            if self.busy(&Target::Server(id.clone())) {
                continue;
            }
            self.issue(Action::Unlock { server: id.clone() }, None);
            let now = self.now();
            self.change().released.insert(id, now);
            n += 1;
        }
        if n > 0 {
            self.notes.push(Note::LocksReleased { servers: n });
        }
    }
}
