//! Figures for the cluster (`qfence bench cluster`): not tests, no thresholds.
//!
//! - commit latency of a plan-state change (compare-and-set) on a three-node cluster on loopback:
//!   from proposing at the leader to the answer after it is committed and applied;
//! - forwarded calls per second one orchestrator verifies and executes against a no-op
//!   controller, end to end over mutual TLS (signed at the leader, checked and run at dc1), and
//!   the rate of the signature-and-checks step alone.

use std::sync::Arc;
use std::time::Duration;

use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId, Term};
use qfence_model::time::monotonic_now;
use serde::Serialize;

use crate::error::ClusterError;
use crate::forward::{ForwardReply, NoopExecutor};
use crate::node::{ClusterNode, NodeOptions, Timing};
use crate::signing::{self, Envelope, NodeKey, NonceCache, VerifyContext};
use crate::state::{Command, ControllerRecord, PlanStateDoc, Response};
use crate::tls::CertificateAuthority;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Sequential plan-state changes to time.
    pub writes: usize,
    /// How long to send forwarded calls.
    pub forward_duration: Duration,
    /// Forwarded calls in flight at once.
    pub concurrency: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            writes: 500,
            forward_duration: Duration::from_secs(3),
            concurrency: 16,
        }
    }
}

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub writes: usize,
    pub commit_p50_ms: f64,
    pub commit_p99_ms: f64,
    pub commit_max_ms: f64,
    pub forwarded_calls: u64,
    pub forwarded_calls_per_second: f64,
    pub forward_concurrency: usize,
    pub verifications_per_second: f64,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "plan-state commit latency, 3 nodes on loopback, {} writes: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.writes, self.commit_p50_ms, self.commit_p99_ms, self.commit_max_ms
        )?;
        writeln!(
            f,
            "forwarded calls verified and executed by one orchestrator (no-op controller, mTLS, {} in flight): {:.0}/s ({} calls)",
            self.forward_concurrency, self.forwarded_calls_per_second, self.forwarded_calls
        )?;
        write!(
            f,
            "signature and checks alone: {:.0}/s",
            self.verifications_per_second
        )
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn name(s: &str) -> Result<OrchestratorId, ClusterError> {
    OrchestratorId::new(s).map_err(|e| ClusterError::Raft(e.to_string()))
}

/// Runs the benchmark on a fresh three-node cluster in a temporary directory.
pub async fn run(options: &BenchOptions) -> Result<BenchReport, ClusterError> {
    let dir = std::env::temp_dir().join(format!(
        "qfence-bench-{}-{}",
        std::process::id(),
        signing::new_nonce()?
    ));
    let result = run_in(&dir, options).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(
    dir: &std::path::Path,
    options: &BenchOptions,
) -> Result<BenchReport, ClusterError> {
    let nodes = start_cluster(dir).await?;
    let leader = nodes[1].clone();
    let (plan, controller) = register_fixture(&leader, &nodes[0]).await?;
    let (latencies, generation) = commit_latencies(&leader, &plan, options.writes).await?;
    // Forwarded calls: the leader at dc2 signs, dc1 verifies and executes.
    let forward = Forward {
        leader,
        to: nodes[0].name().clone(),
        controller,
        plan,
        generation: Generation(generation),
    };
    let (calls, forward_elapsed) = forward.run(options).await?;
    for n in &nodes {
        n.shutdown().await;
    }
    Ok(BenchReport {
        writes: options.writes,
        commit_p50_ms: percentile(&latencies, 0.50),
        commit_p99_ms: percentile(&latencies, 0.99),
        commit_max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
        forwarded_calls: calls,
        forwarded_calls_per_second: calls as f64 / forward_elapsed.as_secs_f64(),
        forward_concurrency: options.concurrency,
        verifications_per_second: verification_rate()?,
    })
}

/// Three nodes on loopback (dc1, dc2, a witness), with leadership moved to dc2 so that calls
/// to dc1's controller are forwarded.
async fn start_cluster(dir: &std::path::Path) -> Result<Vec<ClusterNode>, ClusterError> {
    let ca = CertificateAuthority::generate("bench")?;
    let mut nodes = Vec::new();
    for (n, site) in [
        ("orch-dc1", "dc1"),
        ("orch-dc2", "dc2"),
        ("orch-witness", "witness"),
    ] {
        let opts = NodeOptions {
            name: name(n)?,
            site: SiteId::new(site).map_err(|e| ClusterError::Raft(e.to_string()))?,
            witness: site == "witness",
            listen: ([127, 0, 0, 1], 0).into(),
            advertise: None,
            data_dir: dir.join(n),
            tls: ca.issue(n, &[])?,
            timing: Timing::standard(),
            admin_api: false,
        };
        nodes.push(ClusterNode::start(opts, Arc::new(NoopExecutor)).await?);
    }
    nodes[0].initialize().await?;
    nodes[1].join(&nodes[0].member().address).await?;
    nodes[2].join(&nodes[0].member().address).await?;
    nodes[0].transfer_leadership(nodes[1].name()).await?;
    let deadline = monotonic_now() + Duration::from_secs(10);
    while nodes[1].leadership().await.is_err() {
        if monotonic_now() > deadline {
            return Err(ClusterError::NotLeader { leader: None });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(nodes)
}

/// A plan's state document at generation `g`.
fn plan_doc(g: u64) -> PlanStateDoc {
    PlanStateDoc {
        schema: 1,
        generation: Generation(g),
        body: serde_json::json!({"owner": "dc1", "phase": "steady", "n": g}),
    }
}

/// The plan the writes change and the no-op controller at `dc1` the calls go to.
async fn register_fixture(
    leader: &ClusterNode,
    dc1: &ClusterNode,
) -> Result<(PlanId, ControllerId), ClusterError> {
    let plan = PlanId::new("bench-plan").map_err(|e| ClusterError::Raft(e.to_string()))?;
    leader
        .write(Command::RegisterPlan {
            plan: plan.clone(),
            config: serde_json::json!({}),
            initial_state: plan_doc(0),
        })
        .await?;
    let controller =
        ControllerId::new("noop-dc1").map_err(|e| ClusterError::Raft(e.to_string()))?;
    leader
        .write(Command::RegisterController {
            controller: ControllerRecord {
                id: controller.clone(),
                site: dc1.member().site.clone(),
                reach: vec![],
                config: serde_json::json!({"type": "noop"}),
            },
        })
        .await?;
    Ok((plan, controller))
}

/// Commit latency: sequential compare-and-sets, alternating owner changes and phase changes.
/// Returns the latencies, sorted, and the plan's generation after them.
async fn commit_latencies(
    leader: &ClusterNode,
    plan: &PlanId,
    writes: usize,
) -> Result<(Vec<Duration>, u64), ClusterError> {
    let mut latencies = Vec::with_capacity(writes);
    let mut generation = 0;
    for i in 0..writes {
        let next = if i % 2 == 0 {
            generation + 1
        } else {
            generation
        };
        let started = monotonic_now();
        let r = leader
            .write(Command::PlanStateCas {
                plan: plan.clone(),
                expected_generation: Generation(generation),
                new_state: plan_doc(next),
            })
            .await?;
        latencies.push(started.elapsed());
        if r != Response::Applied {
            return Err(ClusterError::Raft(format!(
                "benchmark write {i} was not applied: {r:?}"
            )));
        }
        generation = next;
    }
    latencies.sort();
    Ok((latencies, generation))
}

/// Forwarded calls from the leader to `to`, signed for `plan` at `generation`.
struct Forward {
    leader: ClusterNode,
    to: OrchestratorId,
    controller: ControllerId,
    plan: PlanId,
    generation: Generation,
}

impl Forward {
    /// Calls from `options.concurrency` tasks for `options.forward_duration`: how many were
    /// executed, and in how long.
    async fn run(self, options: &BenchOptions) -> Result<(u64, Duration), ClusterError> {
        let started = monotonic_now();
        let stop = started + options.forward_duration;
        let this = Arc::new(self);
        let mut tasks = Vec::new();
        for _ in 0..options.concurrency.max(1) {
            let this = this.clone();
            tasks.push(tokio::spawn(async move { this.until(stop).await }));
        }
        let mut calls = 0;
        for t in tasks {
            calls += t.await.map_err(|e| ClusterError::Raft(e.to_string()))??;
        }
        Ok((calls, started.elapsed()))
    }

    /// One task's calls, one after the other, until `stop`.
    async fn until(&self, stop: std::time::Instant) -> Result<u64, ClusterError> {
        let call = qfence_call::Call::new(
            qfence_call::Verb::Check,
            qfence_call::Target::controller(SiteId::new("dc1").expect("a valid name")),
            Duration::from_secs(5),
        );
        let mut done = 0u64;
        while monotonic_now() < stop {
            let signed = self
                .leader
                .sign_call(
                    &self.controller,
                    Some((self.plan.clone(), self.generation)),
                    &call,
                )
                .await?;
            match self.leader.send_signed(&self.to, &signed).await? {
                ForwardReply::Done { .. } => done += 1,
                other => {
                    return Err(ClusterError::Raft(format!(
                        "forwarded call not executed: {other:?}"
                    )));
                }
            }
        }
        Ok(done)
    }
}

/// Signature checks and the other verifications, in a loop, for one second.
fn verification_rate() -> Result<f64, ClusterError> {
    let key = NodeKey::generate()?;
    let leader = name("orch-dc2")?;
    let controller =
        ControllerId::new("noop-dc1").map_err(|e| ClusterError::Raft(e.to_string()))?;
    let now = qfence_model::time::now_unix_ms();
    let mut nonces = NonceCache::default();
    let calls: Vec<_> = (0..2_000)
        .map(|i| {
            Ok(key.sign(Envelope {
                plan: None,
                generation: Generation(0),
                term: Term(1),
                leader: leader.clone(),
                nonce: format!("{i:032x}"),
                expires_at_unix_ms: now + 30_000,
                controller: controller.clone(),
                call: serde_json::json!({"op": "noop"}),
            }))
        })
        .collect::<Result<_, ClusterError>>()?;
    let ctx = VerifyContext {
        now_unix_ms: now,
        known_term: Term(1),
        leader_of_known_term: Some(&leader),
        signer_key: Some(key.public_key()),
        plan_generation: None,
    };
    let started = monotonic_now();
    let mut n = 0u64;
    for c in &calls {
        signing::verify(c, &ctx, &mut nonces).map_err(|e| ClusterError::Raft(e.to_string()))?;
        n += 1;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
