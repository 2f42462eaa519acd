//! Instance HA in the runtime (ADR 0025): one loop per configured cloud, acting on the leader
//! only, around the pure core of [`qfence_core::instance_ha`].
//!
//! # The model
//!
//! Every `poll_seconds` the loop reads Nova through the cloud's Nova driver into a
//! [`NovaView`] ([`nova::poll`]); a failed poll keeps the old view and marks Nova
//! unreachable, which the core's observer gate reads. After every poll and every result it
//! builds a [`Snapshot`] (the replicated [`CloudState`], the view, each host's latest fence
//! reading, the results and what is in flight, the leadership, `now` from the runtime's
//! clock) and calls [`decide`]. The decision's sentence goes to the event log when it
//! changes; its state change is written first, a compare-and-set on the cloud's revision in
//! the cluster ([`qfence_cluster::state::Command::CloudStateCas`]), and only then are its
//! commands started ([`exec`]): a host's fence through its binding's controller, routed by
//! the cluster like a plan's fence and read back; every Nova command through the Nova
//! driver. Each command runs under a child of the leadership's token, so losing leadership
//! cancels what it started, and its result wakes the loop.
//!
//! What the core needs across polls is in the replicated state, so a new leader resumes
//! each host from its record. What is not replicated (the view, fence readings, results,
//! operations in flight) starts empty under a new term: the core treats an operation it
//! issued and cannot find as ended UNKNOWN, and re-reads before it relies on anything.
//!
//! Two more inputs come from this orchestrator, not from Nova: the fence_kdump messages its
//! listener heard ([`kdump`]), mapped to hosts by their sender, and the sites the cluster has
//! lost (no orchestrator there answers), which close the core's site gate: a site lost as a
//! whole is the site failover's, not Instance HA's.

mod exec;
pub mod kdump;
mod nova;
pub mod view;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qfence_cluster::routing::Candidate;
use qfence_cluster::state::{CloudStateDoc, Command as ClusterCommand, Response};
use qfence_controllers::AnyDriver;
use qfence_core::instance_ha::{
    Action, CloudState, CloudStateChange, Command, Decision, HostPhase, NovaView, ObserverHealth,
    StoredCloudState, Target, decide,
};
use qfence_core::{Leadership, Millis, Observation, OpId, OpResult};
use qfence_model::config::HostName;
use qfence_model::{CloudId, SiteId, Term};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::drivers::LocalDrivers;
use crate::engine::{Engine, without_times};
use crate::events::{EventKind, NewEvent};
use crate::shared::{Inner, lock};
use crate::{RuntimeError, capitalised};

pub use view::CloudRuntime;

/// The schema number of the cloud state the core defines, as stored in the cluster.
pub const CLOUD_STATE_SCHEMA: u32 = 1;
/// The longest wait between two decisions when nothing happens (results wake it sooner).
pub const DECIDE_EVERY: Duration = Duration::from_secs(1);
/// How long a leadership confirmed by the cluster counts as a lease for the core.
pub const LEASE: Duration = Duration::from_secs(1);
/// Results older than this are forgotten (the core judges each within a decision or two).
const KEEP_RESULTS: Duration = Duration::from_secs(3600);
/// A host's name is resolved again after this long (its kdump messages' sender).
const RESOLVE_EVERY: Duration = Duration::from_secs(60);
/// The longest one name resolution may take (the loop waits for it).
const RESOLVE_LIMIT: Duration = Duration::from_secs(1);

/// The Instance HA service of one orchestrator: a loop per cloud of the configuration.
#[derive(Debug, Clone)]
pub struct InstanceHa {
    inner: Arc<Inner>,
    drivers: Arc<LocalDrivers>,
    /// The fence_kdump messages this orchestrator's listeners heard.
    heard: kdump::HeardByPort,
}

/// What one cloud's loop keeps between decisions, shared with the commands it started.
#[derive(Debug, Default)]
struct Local {
    /// The term this was gathered in: a new term starts from nothing.
    term: Option<Term>,
    view: NovaView,
    /// When the last poll was made (successful or not).
    polled: Option<Millis>,
    fences: BTreeMap<HostName, Observation>,
    /// Each host's fence_kdump messages, as the listener heard them from its address.
    kdump: BTreeMap<HostName, Vec<Millis>>,
    /// The addresses hosts without a configured `address` resolved to, and when.
    resolved: BTreeMap<HostName, (Millis, Vec<IpAddr>)>,
    results: BTreeMap<OpId, OpResult>,
    in_flight: BTreeMap<OpId, Target>,
    observer: ObserverHealth,
    /// The last sentence written to the event log, times masked.
    last_recorded: Option<String>,
    /// The last decision's `now`: the next one is later (operation ids include it).
    last_now: Millis,
}

/// One cloud's loop.
#[derive(Debug, Clone)]
struct CloudLoop {
    ha: InstanceHa,
    cloud: CloudId,
    local: Arc<Mutex<Local>>,
    wake: Arc<Notify>,
}

impl InstanceHa {
    /// The service over an engine's shared parts and this orchestrator's drivers.
    pub fn new(engine: &Engine, drivers: Arc<LocalDrivers>) -> Self {
        Self {
            inner: engine.inner.clone(),
            drivers,
            heard: Arc::default(),
        }
    }

    /// Runs a loop for every cloud of the configuration until `stop` is cancelled, and a
    /// fence_kdump listener on each port a cloud with `check_kdump` names. Every
    /// orchestrator runs them; only the leader's loops act.
    pub async fn run(self, stop: CancellationToken) {
        let config = self.inner.config();
        let clouds: Vec<CloudId> = config.config().instance_ha.keys().cloned().collect();
        let ports: BTreeSet<u16> = config
            .config()
            .instance_ha
            .values()
            .filter(|c| c.check_kdump)
            .map(|c| c.kdump_port)
            .collect();
        let mut listeners = Vec::new();
        for port in ports {
            match kdump::bind(port).await {
                Ok(socket) => {
                    tracing::info!(port, "Listening for fence_kdump messages");
                    listeners.push(tokio::spawn(kdump::listen(
                        socket,
                        self.heard.clone(),
                        self.inner.clock,
                        stop.clone(),
                    )));
                }
                // The core still waits kdump_timeout_seconds before each fence (fail-open),
                // but no dump will ever be seen from here.
                Err(e) => tracing::error!(
                    port,
                    "Cannot listen for fence_kdump messages: {e}; hosts are fenced after \
                     kdump_timeout_seconds without their dump being seen"
                ),
            }
        }
        let loops = clouds.into_iter().map(|cloud| {
            let l = CloudLoop {
                ha: self.clone(),
                cloud,
                local: Arc::default(),
                wake: Arc::new(Notify::new()),
            };
            tokio::spawn(l.run(stop.clone()))
        });
        for task in loops.collect::<Vec<_>>().into_iter().chain(listeners) {
            let _ = task.await;
        }
    }

    /// A cloud's replicated state (`None`: nothing written yet).
    pub fn cloud_state(&self, cloud: &CloudId) -> Result<Option<CloudState>, RuntimeError> {
        read_state(&self.inner, cloud)
    }
}

/// A cloud's replicated state, as stored in the cluster.
pub(crate) fn read_state(
    inner: &Inner,
    cloud: &CloudId,
) -> Result<Option<CloudState>, RuntimeError> {
    let doc = inner.node.read(|s| s.clouds.get(cloud).cloned());
    let Some(doc) = doc else {
        return Ok(None);
    };
    if doc.schema != CLOUD_STATE_SCHEMA {
        return Err(RuntimeError::Setup(format!(
            "cloud {cloud}: state has schema {}, this build reads schema {CLOUD_STATE_SCHEMA}",
            doc.schema
        )));
    }
    let stored: StoredCloudState = serde_json::from_value(doc.body).map_err(|e| {
        RuntimeError::Setup(format!(
            "cloud {cloud}: the stored state does not decode: {e}"
        ))
    })?;
    Ok(Some(stored.into_current()))
}

impl CloudLoop {
    async fn run(self, stop: CancellationToken) {
        tracing::info!(cloud = %self.cloud, "Instance HA loop started");
        loop {
            let wait = tokio::select! {
                () = stop.cancelled() => break,
                w = self.cycle() => w,
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                // A short pause coalesces a burst of results into one decision.
                () = self.wake.notified() => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        tracing::info!(cloud = %self.cloud, "Instance HA loop stopped");
    }

    /// One turn: confirm the leadership, poll Nova when due, decide, commit, start the
    /// commands. Returns how long to wait before the next turn.
    async fn cycle(&self) -> Duration {
        let inner = &self.ha.inner;
        let config = inner.config();
        let Some(cloud_config) = config.cloud(self.cloud.as_str()) else {
            return DECIDE_EVERY;
        };
        let poll_every = cloud_config.poll;
        let Some((lead, _)) = self.confirm().await else {
            return DECIDE_EVERY;
        };
        self.enter_term(lead.term);
        let due = lock(&self.local)
            .polled
            .is_none_or(|p| inner.clock.now().since(p) >= poll_every);
        if due {
            self.poll(cloud_config, &lead.token).await;
        }
        // Before the lease's confirmation: a name lookup may take a while.
        if cloud_config.check_kdump
            && let Ok(Some(state)) = read_state(inner, &self.cloud)
        {
            self.resolve_waiting(cloud_config, &state).await;
        }
        // The lease counts from a confirmation after the poll, which may have taken seconds.
        let Some((lead, from)) = self.confirm().await else {
            return DECIDE_EVERY;
        };
        if local_term(&self.local) != Some(lead.term) {
            return Duration::ZERO;
        }
        let leadership = Leadership {
            leader: true,
            term: lead.term,
            lease_until: from.plus(LEASE),
        };
        let state = match read_state(inner, &self.cloud) {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => {
                tracing::error!(cloud = %self.cloud, "Instance HA cannot read its state: {e}");
                return DECIDE_EVERY;
            }
        };
        let decision = self.decide(&config, &state, leadership);
        self.publish(&decision, &state, lead.term);
        if let Some(change) = &decision.state_change {
            if let Err(e) = self.commit(change).await {
                tracing::warn!(cloud = %self.cloud, term = %lead.term, "Instance HA state not written, its commands dropped: {e}");
                return DECIDE_EVERY;
            }
            self.ha
                .inner
                .metrics
                .instance_ha_changes(self.cloud.as_str(), &state, &change.next);
        }
        for command in decision.commands {
            self.start(command, &lead.token);
        }
        let polled = lock(&self.local).polled.unwrap_or(from);
        let next_poll = polled.plus(poll_every).since(inner.clock.now());
        next_poll.clamp(Duration::from_millis(10), DECIDE_EVERY)
    }

    /// Asks the cluster whether this orchestrator leads, and when it asked (the lease
    /// counts from there); `None` (after standing by) when it does not.
    async fn confirm(&self) -> Option<(qfence_cluster::node::Leadership, Millis)> {
        let from = self.ha.inner.clock.now();
        let lead = tokio::time::timeout(LEASE * 2, self.ha.inner.node.leadership()).await;
        match lead {
            Ok(Ok(lead)) if !lead.token.is_cancelled() => Some((lead, from)),
            _ => {
                self.not_leading();
                None
            }
        }
    }

    /// Not (or no longer) the leader: forget what was gathered; the new leader starts fresh.
    fn not_leading(&self) {
        let mut local = lock(&self.local);
        if local.term.is_some() {
            tracing::info!(cloud = %self.cloud, "Instance HA stands by: not the leader");
            *local = Local::default();
        }
        lock(&self.ha.inner.instance_ha)
            .entry(self.cloud.clone())
            .or_default()
            .leading = false;
    }

    /// Under a new term, what the last one gathered is dropped (its operations were
    /// cancelled with its leadership).
    fn enter_term(&self, term: Term) {
        let mut local = lock(&self.local);
        if local.term != Some(term) {
            if local.term.is_some() {
                tracing::info!(cloud = %self.cloud, term = %term, "Instance HA resumes under a new term");
            }
            *local = Local {
                term: Some(term),
                last_now: local.last_now,
                ..Local::default()
            };
        }
    }

    /// Reads Nova into the view; a failed read keeps the old view and says Nova is
    /// unreachable.
    async fn poll(&self, cloud: &qfence_model::config::CloudConfig, token: &CancellationToken) {
        let inner = &self.ha.inner;
        let at = inner.clock.now();
        let read = match self.ha.drivers.nova(&cloud.nova) {
            Ok(d) => match &*d {
                AnyDriver::Nova(n) => {
                    nova::poll(n, &inner.me, nova_timeout(inner, cloud), token, at).await
                }
                _ => Err(format!(
                    "controller {} is not a Nova controller",
                    cloud.nova
                )),
            },
            Err(e) => Err(e),
        };
        let mut local = lock(&self.local);
        local.polled = Some(at);
        local.observer.quorum = true;
        match read {
            Ok(mut view) => {
                if !local.observer.nova_reachable && local.term.is_some() {
                    tracing::info!(cloud = %self.cloud, "Nova answered the poll");
                }
                view.migrations_read_at = std::mem::take(&mut local.view.migrations_read_at);
                local.view = view;
                local.observer.nova_reachable = true;
            }
            Err(e) => {
                if local.observer.nova_reachable || local.view.read_at == Millis(0) {
                    tracing::warn!(cloud = %self.cloud, "Nova did not answer the poll: {e}");
                }
                local.observer.nova_reachable = false;
            }
        }
    }

    /// Resolves the names of hosts waiting on their dump that have no configured `address`
    /// (each at most every `RESOLVE_EVERY`): their kdump messages' sender is what their name
    /// resolves to, as for `fence_kdump -n`.
    async fn resolve_waiting(&self, cloud: &qfence_model::config::CloudConfig, state: &CloudState) {
        let now = self.ha.inner.clock.now();
        let due: Vec<HostName> = {
            let local = lock(&self.local);
            state
                .hosts
                .iter()
                .filter(|(h, r)| {
                    r.phase == HostPhase::KdumpWait
                        && cloud
                            .hosts
                            .get(h.as_str())
                            .and_then(|e| e.address)
                            .is_none()
                        && local
                            .resolved
                            .get(*h)
                            .is_none_or(|(at, _)| now.since(*at) >= RESOLVE_EVERY)
                })
                .map(|(h, _)| h.clone())
                .collect()
        };
        for host in due {
            let addrs = kdump::resolve(&host, RESOLVE_LIMIT).await;
            if addrs.is_empty() {
                tracing::warn!(cloud = %self.cloud, host = %host, "The host's name does not resolve: its fence_kdump messages cannot be recognised (configure its address)");
            }
            lock(&self.local).resolved.insert(host, (now, addrs));
        }
    }

    /// The core's decision on this instant.
    fn decide(
        &self,
        config: &crate::effective::EffectiveConfig,
        state: &CloudState,
        leadership: Leadership,
    ) -> Decision {
        let inner = &self.ha.inner;
        let mut local = lock(&self.local);
        let now = Millis(inner.clock.now().0.max(local.last_now.0 + 1));
        local.last_now = now;
        local.results.retain(|_, r| now.since(r.at) <= KEEP_RESULTS);
        if let Some(cloud) = config.cloud(self.cloud.as_str()) {
            let heard = lock(&self.ha.heard);
            let empty = kdump::Heard::default();
            let on_port = heard.get(&cloud.kdump_port).unwrap_or(&empty);
            let hosts = local.view.computes.iter().map(|c| &c.host);
            let resolved = |h: &HostName| local.resolved.get(h).map_or(&[][..], |(_, a)| a);
            local.kdump = kdump::by_host(cloud, on_port, hosts, resolved);
        }
        let lost = lost_sites(&inner.node.candidates());
        if lost != local.observer.lost_sites {
            let names: Vec<&str> = lost.iter().map(SiteId::as_str).collect();
            tracing::info!(cloud = %self.cloud, "The cluster's lost sites are now: {}", if names.is_empty() { "none".to_owned() } else { names.join(", ") });
            local.observer.lost_sites = lost;
        }
        let snapshot = qfence_core::instance_ha::Snapshot {
            config: config.validated(),
            cloud: self.cloud.clone(),
            state,
            nova: &local.view,
            fences: &local.fences,
            kdump: &local.kdump,
            results: &local.results,
            in_flight: &local.in_flight,
            leadership,
            observer: &local.observer,
            now,
        };
        decide(&snapshot)
    }

    /// Logs and records the sentence when it changed, and shows it to the API.
    fn publish(&self, decision: &Decision, state: &CloudState, term: Term) {
        let inner = &self.ha.inner;
        let sentence = decision.sentence.to_string();
        let masked = without_times(&sentence);
        let news = {
            let mut local = lock(&self.local);
            let news = local.last_recorded.as_deref() != Some(masked.as_str());
            local.last_recorded = Some(masked);
            let mut shown = lock(&inner.instance_ha);
            let entry = shown.entry(self.cloud.clone()).or_default();
            entry.leading = true;
            entry.term = Some(term);
            entry.last_decision = Some(sentence.clone());
            entry.decided_at = Some(local.last_now);
            entry.view = Some(local.view.clone());
            entry.nova_reachable = local.observer.nova_reachable;
            entry.state = Some(
                decision
                    .state_change
                    .as_ref()
                    .map_or_else(|| state.clone(), |c| c.next.clone()),
            );
            news
        };
        if !news {
            return;
        }
        if decision.sentence.is_routine() {
            tracing::debug!(cloud = %self.cloud, term = %term, "{}", capitalised(&sentence));
        } else {
            tracing::info!(cloud = %self.cloud, term = %term, "{}", capitalised(&sentence));
        }
        inner.record(
            NewEvent::new(EventKind::Decision, inner.me.as_str(), sentence)
                .term(term.0)
                .data(serde_json::json!({"instance_ha": self.cloud})),
        );
    }

    /// Writes the state change as a compare-and-set on the cloud's revision.
    async fn commit(&self, change: &CloudStateChange) -> Result<(), RuntimeError> {
        let body = serde_json::to_value(StoredCloudState::from(change.next.clone()))
            .map_err(|e| RuntimeError::Setup(format!("cloud {}: {e}", self.cloud)))?;
        let response = self
            .ha
            .inner
            .node
            .write(ClusterCommand::CloudStateCas {
                cloud: self.cloud.clone(),
                expected_revision: change.expect_revision,
                new_state: CloudStateDoc {
                    schema: CLOUD_STATE_SCHEMA,
                    revision: change.next.revision,
                    body,
                    changed_in_term: Term(0),
                },
            })
            .await?;
        match response {
            Response::Applied => Ok(()),
            other => Err(RuntimeError::Setup(format!(
                "cloud {}: the cluster refused the write: {other:?}",
                self.cloud
            ))),
        }
    }

    /// Records an event command at once; starts any other in its own task under a child of
    /// the leadership's token, listed in flight until its result is filed.
    fn start(&self, command: Command, leadership: &CancellationToken) {
        if let Action::Event { event } = &command.action {
            exec::record_event(&self.ha.inner, &self.cloud, &command, event);
            return;
        }
        let Some(target) = command.action.target() else {
            return;
        };
        {
            let mut local = lock(&self.local);
            if local.in_flight.values().any(|t| *t == target) {
                tracing::debug!(cloud = %self.cloud, op = %command.op, "Busy: one operation per target");
                return;
            }
            local.in_flight.insert(command.op.clone(), target);
        }
        exec::record_start(&self.ha.inner, &self.cloud, &command);
        let token = leadership.child_token();
        let this = self.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let ran = exec::run(&this.ha, &this.cloud, &command, &token).await;
            this.file(&command, ran, started.elapsed());
        });
    }

    /// Files a command's result (and its reading, or the migrations it read) and wakes the
    /// loop.
    fn file(&self, command: &Command, ran: exec::Ran, took: Duration) {
        let inner = &self.ha.inner;
        let at = inner.clock.now();
        let news = {
            let mut local = lock(&self.local);
            local.in_flight.remove(&command.op);
            let mut news = ran.outcome != qfence_core::Outcome::Done;
            if let Some((host, reading)) = &ran.reading {
                news |= local.fences.get(host).map(|o| o.value) != Some(reading.value);
                local.fences.insert(host.clone(), reading.clone());
            }
            if let Some((server, migrations)) = ran.migrations.clone() {
                local.view.migrations.retain(|m| m.server != server);
                local.view.migrations.extend(migrations);
                local.view.migrations_read_at.insert(server, at);
            } else {
                news |= ran.reading.is_none();
            }
            local.results.insert(
                command.op.clone(),
                OpResult {
                    binding: None,
                    outcome: ran.outcome,
                    at: ran.reading.as_ref().map_or(at, |(_, r)| r.at),
                },
            );
            news
        };
        if news {
            exec::record_result(inner, &self.cloud, command, &ran, took);
        }
        self.wake.notify_one();
    }
}

/// The sites where no orchestrator answers the leader: the cluster lost them. A site with no
/// orchestrator at all is never called lost (nothing can say so).
pub(crate) fn lost_sites(candidates: &[Candidate]) -> BTreeSet<SiteId> {
    let mut live: BTreeMap<&SiteId, bool> = BTreeMap::new();
    for c in candidates {
        *live.entry(&c.site).or_default() |= c.live;
    }
    live.into_iter()
        .filter(|(_, l)| !l)
        .map(|(s, _)| s.clone())
        .collect()
}

fn local_term(local: &Mutex<Local>) -> Option<Term> {
    lock(local).term
}

/// The Nova controller's own timeout for one call (its `timeout_seconds`).
fn nova_timeout(inner: &Inner, cloud: &qfence_model::config::CloudConfig) -> Duration {
    inner
        .config()
        .controller(cloud.nova.as_str())
        .map_or(Duration::from_secs(10), |c| c.timeout)
}

#[cfg(test)]
mod tests {
    use qfence_model::OrchestratorId;

    use super::*;

    fn member(name: &str, site: &str, live: bool) -> Candidate {
        Candidate {
            id: OrchestratorId::new(name).unwrap(),
            site: SiteId::new(site).unwrap(),
            live,
            witness: site == "witness",
            active: true,
        }
    }

    #[test]
    fn a_site_is_lost_when_none_of_its_orchestrators_answers() {
        let sites = |c: &[Candidate]| -> Vec<String> {
            lost_sites(c).iter().map(ToString::to_string).collect()
        };
        let all = [
            member("dc1-a", "dc1", true),
            member("dc2-a", "dc2", true),
            member("dc2-b", "dc2", true),
            member("witness-a", "witness", true),
        ];
        assert!(sites(&all).is_empty());
        let mut one_of_two = all.clone();
        one_of_two[1].live = false;
        assert!(sites(&one_of_two).is_empty(), "dc2-b still answers");
        let mut both = one_of_two;
        both[2].live = false;
        assert_eq!(sites(&both), ["dc2"]);
        // In maintenance is not lost: it answers.
        let mut drained = all;
        drained[0].active = false;
        assert!(sites(&drained).is_empty());
    }
}
