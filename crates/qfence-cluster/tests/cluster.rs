//! In-process clusters on loopback: one test binary, each test a short story.

use std::sync::Arc;
use std::time::Duration;

use qfence_call::{Answer, Call, Reading, Target, Verb};
use qfence_cluster::forward::{
    BoxFuture, CallExecutor, CallOutcome, ForwardReply, NoopExecutor, WriteHandler,
};
use qfence_cluster::node::{ClusterNode, NodeOptions, Timing};
use qfence_cluster::signing::{NodeKey, Refusal};
use qfence_cluster::state::{Command, ControllerRecord, PlanStateDoc, Response};
use qfence_cluster::tls::{CertificateAuthority, NodeTls};
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId};
use serde_json::json;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// Runs until cancelled (or 10 s), and remembers that it was cancelled.
#[derive(Debug, Default)]
struct SlowExecutor {
    started: std::sync::atomic::AtomicBool,
    cancelled: std::sync::atomic::AtomicBool,
}

impl CallExecutor for SlowExecutor {
    fn execute<'a>(
        &'a self,
        _controller: &'a ControllerId,
        call: &'a Call,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            self.started
                .store(true, std::sync::atomic::Ordering::SeqCst);
            tokio::select! {
                () = cancel.cancelled() => {
                    self.cancelled.store(true, std::sync::atomic::Ordering::SeqCst);
                    Err("cancelled".into())
                }
                () = tokio::time::sleep(Duration::from_secs(10)) => Ok(Answer::Problems(vec![format!("finished {}", call.target.capability)])),
            }
        })
    }
}

/// Runs any forwarded API write: whatever refuses one must be the cluster's own check.
struct RunsAnything;

impl WriteHandler for RunsAnything {
    fn handle<'a>(
        &'a self,
        _from: &'a OrchestratorId,
        _write: serde_json::Value,
    ) -> BoxFuture<'a, serde_json::Value> {
        Box::pin(async { json!("ran") })
    }
}

/// A call of `capability` on `db1` at dc1: a perform for `power.off`, a check otherwise.
fn op(capability: &str) -> Call {
    let verb = if capability == "power.off" {
        Verb::Perform
    } else {
        Verb::Check
    };
    Call::new(
        verb,
        Target {
            capability: capability.into(),
            resource: "db1".into(),
            params: Default::default(),
            site: SiteId::new("dc1").unwrap(),
        },
        Duration::from_secs(5),
    )
}

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,qfence_cluster=info".into()),
        )
        .with_test_writer()
        .try_init();
}

fn step(s: &str) {
    tracing::info!("--- {s}");
}

fn id(s: &str) -> OrchestratorId {
    OrchestratorId::new(s).unwrap()
}

struct Site {
    node: ClusterNode,
    opts: NodeOptions,
}

async fn start(ca: &CertificateAuthority, name: &str, site: &str, dir: &TempDir) -> Site {
    start_with(ca, name, site, dir, Arc::new(NoopExecutor)).await
}

async fn start_with(
    ca: &CertificateAuthority,
    name: &str,
    site: &str,
    dir: &TempDir,
    executor: Arc<dyn CallExecutor>,
) -> Site {
    let opts = NodeOptions {
        name: id(name),
        site: SiteId::new(site).unwrap(),
        witness: site == "witness",
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        data_dir: dir.path().join(name),
        tls: ca.issue(name, &[]).unwrap(),
        timing: Timing::fast(),
        admin_api: false,
    };
    let node = ClusterNode::start(opts.clone(), executor).await.unwrap();
    Site { node, opts }
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn plan() -> PlanId {
    PlanId::new("erp-db").unwrap()
}

fn doc(generation: u64, owner: &str) -> PlanStateDoc {
    PlanStateDoc {
        schema: 1,
        generation: Generation(generation),
        body: json!({"owner": owner, "phase": "steady"}),
    }
}

fn controller(name: &str, site: &str, reach: &[&str]) -> ControllerRecord {
    ControllerRecord {
        id: ControllerId::new(name).unwrap(),
        site: SiteId::new(site).unwrap(),
        reach: reach.iter().map(|s| SiteId::new(*s).unwrap()).collect(),
        config: json!({"type": "noop"}),
    }
}

/// dc1, dc2 and a witness, initialised at dc1, with the others joined.
async fn three(dir: &TempDir) -> (CertificateAuthority, Vec<Site>) {
    let ca = CertificateAuthority::generate("test").unwrap();
    let dc1 = start(&ca, "orch-dc1", "dc1", dir).await;
    dc1.node.initialize().await.unwrap();
    let dc2 = start(&ca, "orch-dc2", "dc2", dir).await;
    let wit = start(&ca, "orch-witness", "witness", dir).await;
    dc2.node.join(&dc1.node.member().address).await.unwrap();
    // Joining through a non-leader exercises the hop to the leader.
    wit.node.join(&dc2.node.member().address).await.unwrap();
    (ca, vec![dc1, dc2, wit])
}

async fn leader_of(sites: &[&ClusterNode]) -> ClusterNode {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        for n in sites {
            if n.leadership().await.is_ok() {
                return (*n).clone();
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_single_orchestrator_is_a_one_voter_cluster_and_keeps_its_state() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("solo").unwrap();
    step("A single node initialises itself and leads");
    let solo = start(&ca, "orch-solo", "dc1", &dir).await;
    solo.node.initialize().await.unwrap();
    let l = solo.node.leadership().await.unwrap();
    assert!(l.term.0 >= 1);

    step("It registers a plan and moves it through a compare-and-set");
    let r = solo
        .node
        .write(Command::RegisterPlan {
            plan: plan(),
            config: json!({}),
            initial_state: doc(0, "dc1"),
        })
        .await
        .unwrap();
    assert_eq!(r, Response::Applied);
    let ok = solo
        .node
        .write(Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc2"),
        })
        .await
        .unwrap();
    assert_eq!(ok, Response::Applied);
    let lost = solo
        .node
        .write(Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(0),
            new_state: doc(1, "dc1"),
        })
        .await
        .unwrap();
    assert!(matches!(lost, Response::Conflict { .. }), "{lost:?}");

    step("After a restart the state and its own key are still there");
    let key_before = solo.node.state().node_keys[&id("orch-solo")].clone();
    solo.node.shutdown().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = ClusterNode::start(solo.opts.clone(), Arc::new(NoopExecutor))
        .await
        .unwrap();
    again.initialize().await.unwrap();
    let state = again.state();
    assert_eq!(state.plans[&plan()].state, doc(1, "dc2"));
    assert_eq!(state.node_keys[&id("orch-solo")], key_before);
    assert!(again.leadership().await.unwrap().term >= l.term);
    again.shutdown().await;
}

/// Answers a call only if it was handed the caller's very `Call` (the same value, at the same
/// address), with a reading that JSON cannot carry (stamped before the Unix epoch): a local
/// call that went through serialisation on either way would fail.
#[derive(Debug, Default)]
struct SameValueExecutor {
    expected: std::sync::atomic::AtomicUsize,
}

impl CallExecutor for SameValueExecutor {
    fn execute<'a>(
        &'a self,
        _controller: &'a ControllerId,
        call: &'a Call,
        _cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            let at = std::ptr::from_ref(call) as usize;
            if at != self.expected.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(format!("a copy of the call arrived: {call:?}"));
            }
            Ok(Answer::Reading(Ok(unserialisable_reading())))
        })
    }
}

fn unserialisable_reading() -> Reading {
    Reading {
        holds: true,
        detail: "PowerState=Off".into(),
        at: std::time::UNIX_EPOCH - Duration::from_secs(1),
        by: id("orch-solo"),
        definitive: false,
    }
}

#[tokio::test]
async fn a_local_call_reaches_the_executor_and_comes_back_without_serialisation() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("solo").unwrap();
    let executor = Arc::new(SameValueExecutor::default());
    let solo = start_with(&ca, "orch-solo", "dc1", &dir, executor.clone()).await;
    solo.node.initialize().await.unwrap();
    let leader = leader_of(&[&solo.node]).await;
    leader
        .write(Command::RegisterController {
            controller: controller("bmc-dc1", "dc1", &[]),
        })
        .await
        .unwrap();
    let bmc = ControllerId::new("bmc-dc1").unwrap();
    wait_until("the controller to be known", || {
        leader.state().controllers.contains_key(&bmc)
    })
    .await;

    step("The call is routed here and handed over as it is");
    let call = op("power.status");
    executor.expected.store(
        std::ptr::from_ref(&call) as usize,
        std::sync::atomic::Ordering::SeqCst,
    );
    let outcome = leader.call(&bmc, None, &call).await;
    let answer = match outcome {
        CallOutcome::Done { by, result } => {
            assert_eq!(by, id("orch-solo"));
            result
        }
        other => panic!("expected the call to run here, unserialised, got {other:?}"),
    };
    assert_eq!(answer, Answer::Reading(Ok(unserialisable_reading())));
    assert!(
        serde_json::to_value(&answer).is_err(),
        "the answer could not have travelled as JSON"
    );
    leader.shutdown().await;
}

#[tokio::test]
async fn three_sites_elect_replicate_forward_and_refuse_bad_calls() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, sites) = three(&dir).await;
    let nodes: Vec<&ClusterNode> = sites.iter().map(|s| &s.node).collect();
    let (dc1, dc2, wit) = (nodes[0], nodes[1], nodes[2]);

    step("All three agree on a leader and a term");
    let leader = leader_of(&nodes).await;
    let term = leader.term();
    for n in &nodes {
        wait_until("everyone to know the leader", || {
            n.leader() == Some(leader.name().clone())
        })
        .await;
        assert_eq!(n.term(), term);
    }
    assert_eq!(dc1.status().members.len(), 3);
    assert!(dc1.status().members.iter().all(|m| m.voter));

    step("Writes replicate to every node, with every node's key");
    leader
        .write(Command::RegisterController {
            controller: controller("bmc-dc1", "dc1", &[]),
        })
        .await
        .unwrap();
    leader
        .write(Command::RegisterPlan {
            plan: plan(),
            config: json!({}),
            initial_state: doc(3, "dc1"),
        })
        .await
        .unwrap();
    for n in &nodes {
        wait_until("replication", || {
            let s = n.state();
            s.controllers.len() == 1 && s.plans.len() == 1 && s.node_keys.len() == 3
        })
        .await;
    }

    step("Leadership moves to dc2, which forwards a check to dc1's orchestrator");
    if leader.name() != dc2.name() {
        leader.transfer_leadership(dc2.name()).await.unwrap();
    }
    let l2 = leader_of(&[dc2]).await;
    assert_eq!(l2.name(), dc2.name());
    // Routing needs dc1 to have answered the new leader's heartbeats.
    wait_until("dc2 to see dc1 live", || {
        dc2.candidates()
            .iter()
            .any(|c| c.id == *dc1.name() && c.live)
    })
    .await;
    let bmc = ControllerId::new("bmc-dc1").unwrap();
    let outcome = dc2
        .call(&bmc, Some((plan(), Generation(3))), &op("power.status"))
        .await;
    match &outcome {
        CallOutcome::Done { by, result } => {
            assert_eq!(by, dc1.name());
            assert!(
                matches!(result, Answer::Reading(Ok(r)) if r.detail.ends_with("Check power.status db1")),
                "{result:?}"
            );
        }
        other => panic!("expected the call to run at dc1, got {other:?}"),
    }

    step("A replayed call is refused");
    let signed = dc2
        .sign_call(&bmc, Some((plan(), Generation(3))), &op("power.status"))
        .await
        .unwrap();
    let first = dc2.send_signed(dc1.name(), &signed).await.unwrap();
    assert!(matches!(first, ForwardReply::Done { .. }), "{first:?}");
    let again = dc2.send_signed(dc1.name(), &signed).await.unwrap();
    assert!(
        matches!(
            &again,
            ForwardReply::Refused {
                refusal: Refusal::ReplayedNonce { .. }
            }
        ),
        "{again:?}"
    );

    step("A call with a forged signature is refused");
    let mut forged = dc2
        .sign_call(&bmc, Some((plan(), Generation(3))), &op("power.off"))
        .await
        .unwrap();
    let forger = NodeKey::generate().unwrap();
    forged = forger.sign(forged.envelope);
    let r = dc2.send_signed(dc1.name(), &forged).await.unwrap();
    assert!(
        matches!(
            &r,
            ForwardReply::Refused {
                refusal: Refusal::BadSignature { .. }
            }
        ),
        "{r:?}"
    );

    step("A call carrying a stale generation is refused");
    dc2.write(Command::PlanStateCas {
        plan: plan(),
        expected_generation: Generation(3),
        new_state: doc(4, "dc2"),
    })
    .await
    .unwrap();
    wait_until("dc1 to apply generation 4", || {
        dc1.state().plan_generation(&plan()) == Some(Generation(4))
    })
    .await;
    let stale = dc2
        .sign_call(&bmc, Some((plan(), Generation(3))), &op("power.off"))
        .await
        .unwrap();
    let r = dc2.send_signed(dc1.name(), &stale).await.unwrap();
    assert!(
        matches!(
            &r,
            ForwardReply::Refused {
                refusal: Refusal::StaleGeneration { .. }
            }
        ),
        "{r:?}"
    );

    step("Leadership changes while a signed call is in flight: the old leader's call is deposed");
    let in_flight = dc2
        .sign_call(&bmc, Some((plan(), Generation(4))), &op("power.off"))
        .await
        .unwrap();
    let old = dc2.leadership().await.unwrap();
    dc2.transfer_leadership(wit.name()).await.unwrap();
    wait_until("dc1 to learn the witness leads", || {
        dc1.leader() == Some(wit.name().clone())
    })
    .await;
    assert!(
        old.token.is_cancelled(),
        "losing leadership cancels what it started"
    );
    let r = dc2.send_signed(dc1.name(), &in_flight).await.unwrap();
    match &r {
        ForwardReply::Refused { refusal } => {
            assert!(matches!(refusal, Refusal::Deposed { .. }), "{refusal:?}");
            assert!(
                refusal.to_string().starts_with("deposed: term"),
                "{refusal}"
            );
        }
        other => panic!("expected deposed, got {other:?}"),
    }

    step("The old leader can no longer call at all; the new one routes from the witness");
    let refused = dc2.call(&bmc, None, &op("power.status")).await;
    assert!(
        matches!(refused, CallOutcome::Unknown { .. }),
        "{refused:?}"
    );
    let l3 = leader_of(&[wit]).await;
    wait_until("witness to see dc1 live", || {
        wit.candidates()
            .iter()
            .any(|c| c.id == *dc1.name() && c.live)
    })
    .await;
    let ok = l3.call(&bmc, None, &op("power.status")).await;
    assert!(
        matches!(&ok, CallOutcome::Done { by, .. } if by == dc1.name()),
        "{ok:?}"
    );

    step("The refusals dc2 saw while leading were recorded in the replicated event log");
    let events = wit.state().events;
    for reason in ["replayed nonce", "bad signature", "stale generation"] {
        assert!(
            events.iter().any(|e| e.draft.message.contains(reason)),
            "no {reason:?} event in {events:?}"
        );
    }

    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test]
async fn losing_the_leader_elects_another_and_keeps_every_committed_write() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, sites) = three(&dir).await;
    let nodes: Vec<&ClusterNode> = sites.iter().map(|s| &s.node).collect();
    let leader = leader_of(&nodes).await;
    let first_term = leader.term();
    leader
        .write(Command::RegisterPlan {
            plan: plan(),
            config: json!({}),
            initial_state: doc(0, "dc1"),
        })
        .await
        .unwrap();

    step("A stream of committed plan-state writes");
    let mut committed = 0;
    for g in 0..20u64 {
        let r = leader
            .write(Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(g),
                new_state: doc(g + 1, "dc2"),
            })
            .await
            .unwrap();
        assert_eq!(r, Response::Applied);
        committed = g + 1;
    }

    step("The leader stops; the two others elect a new one in a newer term");
    leader.shutdown().await;
    let survivors: Vec<&ClusterNode> = nodes
        .iter()
        .copied()
        .filter(|n| n.name() != leader.name())
        .collect();
    let next = leader_of(&survivors).await;
    assert!(next.term() > first_term);

    step("Every committed write is there, and writing continues");
    assert_eq!(
        next.state().plan_generation(&plan()),
        Some(Generation(committed))
    );
    let r = next
        .write(Command::PlanStateCas {
            plan: plan(),
            expected_generation: Generation(committed),
            new_state: doc(committed + 1, "dc1"),
        })
        .await
        .unwrap();
    assert_eq!(r, Response::Applied);
    for n in survivors {
        n.shutdown().await;
    }
}

#[tokio::test]
async fn a_node_with_a_certificate_from_another_ca_is_refused() {
    init_logs();
    qfence_cluster::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("real").unwrap();
    let node = start(&ca, "orch-a", "dc1", &dir).await;
    node.node.initialize().await.unwrap();
    let url = format!("https://{}/cluster/status", node.node.member().address);

    step("A member's certificate gets an answer");
    let member: NodeTls = ca.issue("orch-b", &[]).unwrap();
    let ok = member
        .http_client(Duration::from_secs(2))
        .unwrap()
        .get(&url)
        .send()
        .await
        .unwrap();
    assert!(ok.status().is_success());

    step("A CA certificate that is not a member's may not forward an API write");
    node.node.set_write_handler(Arc::new(RunsAnything));
    let body = json!({"from": "orch-b", "write": {"write": "pause"}});
    let reply: Result<serde_json::Value, String> = member
        .http_client(Duration::from_secs(2))
        .unwrap()
        .post(format!(
            "https://{}/cluster/write",
            node.node.member().address
        ))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let refusal = reply.expect_err("a non-member's write is refused");
    assert!(refusal.contains("another member"), "{refusal}");

    step("The admin endpoints are off unless asked for");
    let admin = qfence_cluster::node::AdminClient::new(&member, Duration::from_secs(2)).unwrap();
    let refused = admin
        .write(
            &node.node.member().address,
            &Command::RemoveController {
                controller: ControllerId::new("x").unwrap(),
            },
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");

    step("A certificate from another CA is refused in the handshake");
    let rogue_ca = CertificateAuthority::generate("real").unwrap();
    let mut rogue = rogue_ca.issue("orch-b", &[]).unwrap();
    // It even trusts the real CA, so only our server's check can refuse it.
    rogue.ca_pem = ca.cert_pem().to_owned();
    let err = rogue
        .http_client(Duration::from_secs(2))
        .unwrap()
        .get(&url)
        .send()
        .await;
    assert!(err.is_err(), "{err:?}");

    step("A cluster certificate for one name cannot join under another");
    let impostor_opts = NodeOptions {
        name: id("orch-c"),
        site: SiteId::new("dc2").unwrap(),
        witness: false,
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        data_dir: dir.path().join("impostor"),
        tls: ca.issue("orch-b", &[]).unwrap(),
        timing: Timing::fast(),
        admin_api: false,
    };
    let impostor = ClusterNode::start(impostor_opts, Arc::new(NoopExecutor))
        .await
        .unwrap();
    let err = impostor
        .join(&node.node.member().address)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not for orchestrator orch-c"),
        "{err}"
    );
    assert_eq!(node.node.status().members.len(), 1);
    impostor.shutdown().await;

    step("A client that trusts another CA refuses our server");
    let stranger = rogue_ca.issue("orch-c", &[]).unwrap();
    let err = stranger
        .http_client(Duration::from_secs(2))
        .unwrap()
        .get(&url)
        .send()
        .await;
    assert!(err.is_err(), "{err:?}");
    node.node.shutdown().await;
}

#[tokio::test]
async fn losing_a_site_makes_its_controllers_unknown_unless_another_site_reaches_them() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, sites) = three(&dir).await;
    let nodes: Vec<&ClusterNode> = sites.iter().map(|s| &s.node).collect();
    let (dc1, dc2, wit) = (nodes[0], nodes[1], nodes[2]);
    let leader = leader_of(&nodes).await;
    for c in [
        controller("pve-dc1", "dc1", &[]),
        controller("bmc-dc1", "dc1", &["dc2"]),
    ] {
        leader
            .write(Command::RegisterController { controller: c })
            .await
            .unwrap();
    }
    if leader.name() == dc1.name() {
        leader.transfer_leadership(dc2.name()).await.unwrap();
    }
    let pve = ControllerId::new("pve-dc1").unwrap();
    let bmc = ControllerId::new("bmc-dc1").unwrap();

    step("dc1's orchestrator goes away");
    dc1.shutdown().await;
    let leader = leader_of(&[dc2, wit]).await;
    wait_until("the leader to see dc1 as not live", || {
        leader
            .candidates()
            .iter()
            .any(|c| c.id == *dc1.name() && !c.live)
    })
    .await;

    step("A dc1-only controller reads UNKNOWN; the BMC in reach of dc2 still answers");
    let r = leader.call(&pve, None, &op("vm.status")).await;
    assert!(
        matches!(&r, CallOutcome::Unknown { reason, .. } if reason.contains("no live orchestrator")),
        "{r:?}"
    );
    let r = leader.call(&bmc, None, &op("power.status")).await;
    assert!(
        matches!(&r, CallOutcome::Done { by, .. } if by == dc2.name()),
        "{r:?}"
    );
    dc2.shutdown().await;
    wit.shutdown().await;
}

#[tokio::test]
async fn a_node_joining_after_the_log_was_purged_gets_a_snapshot() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("snap").unwrap();
    let first = start(&ca, "orch-dc1", "dc1", &dir).await;
    first.node.initialize().await.unwrap();

    step("A leader with history, snapshotted and purged");
    for i in 0..30u64 {
        first
            .node
            .write(Command::AppendEvent {
                event: qfence_cluster::state::EventDraft {
                    at_unix_ms: i,
                    plan: None,
                    message: format!("event {i} {}", "x".repeat(200)),
                    fields: json!({}),
                },
            })
            .await
            .unwrap();
    }
    let raft = first.node.raft();
    raft.trigger().snapshot().await.unwrap();
    wait_until("a snapshot", || first.node.metrics().snapshot.is_some()).await;
    let upto = first.node.metrics().snapshot.unwrap().index;
    raft.trigger().purge_log(upto).await.unwrap();
    wait_until("the purge", || {
        first.node.metrics().purged.is_some_and(|p| p.index == upto)
    })
    .await;

    step("A new node joins and receives the state as a snapshot");
    let second = start(&ca, "orch-dc2", "dc2", &dir).await;
    second
        .node
        .join(&first.node.member().address)
        .await
        .unwrap();
    let expected = first.node.state();
    wait_until("the new node to hold the same state", || {
        second.node.state() == expected
    })
    .await;
    assert!(
        second.node.metrics().snapshot.is_some(),
        "it was installed from a snapshot"
    );
    assert_eq!(second.node.state().events.len(), 30);
    first.node.shutdown().await;
    second.node.shutdown().await;
}

#[tokio::test]
async fn a_forwarded_call_running_when_its_leader_is_deposed_is_cancelled() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cancel").unwrap();
    let slow = Arc::new(SlowExecutor::default());
    let dc1 = start_with(&ca, "orch-dc1", "dc1", &dir, slow.clone()).await;
    dc1.node.initialize().await.unwrap();
    let dc2 = start(&ca, "orch-dc2", "dc2", &dir).await;
    let wit = start(&ca, "orch-witness", "witness", &dir).await;
    dc2.node.join(&dc1.node.member().address).await.unwrap();
    wit.node.join(&dc1.node.member().address).await.unwrap();
    let (dc1, dc2, wit) = (&dc1.node, &dc2.node, &wit.node);
    dc1.write(Command::RegisterController {
        controller: controller("bmc-dc1", "dc1", &[]),
    })
    .await
    .unwrap();
    dc1.transfer_leadership(dc2.name()).await.unwrap();
    let leader = leader_of(&[dc2]).await;
    wait_until("dc2 to see dc1 live", || {
        leader
            .candidates()
            .iter()
            .any(|c| c.id == *dc1.name() && c.live)
    })
    .await;

    step("dc2 forwards a long call to dc1, then loses leadership while it runs");
    let bmc = ControllerId::new("bmc-dc1").unwrap();
    let caller = leader.clone();
    let call = tokio::spawn(async move { caller.call(&bmc, None, &op("power.off")).await });
    wait_until("the call to start at dc1", || {
        slow.started.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    dc2.transfer_leadership(wit.name()).await.unwrap();

    step("The old leader reports UNKNOWN and dc1 stopped the call");
    let outcome = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends promptly")
        .unwrap();
    assert!(
        matches!(outcome, CallOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    wait_until("dc1 to cancel the running call", || {
        slow.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    for n in [dc1, dc2, wit] {
        n.shutdown().await;
    }
}

#[tokio::test]
async fn a_restarted_follower_does_not_disturb_the_leader() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (_ca, sites) = three(&dir).await;
    let nodes: Vec<&ClusterNode> = sites.iter().map(|s| &s.node).collect();
    let leader = leader_of(&nodes).await;
    let term = leader.term();
    let follower = sites
        .iter()
        .find(|s| s.node.name() != leader.name())
        .unwrap();

    step("A follower stops for longer than an election timeout, then comes back");
    follower.node.shutdown().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let back = ClusterNode::start(follower.opts.clone(), Arc::new(NoopExecutor))
        .await
        .unwrap();
    wait_until("the follower to know the leader", || {
        back.leader() == Some(leader.name().clone())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(leader.term(), term, "pre-vote keeps the term");
    assert!(leader.leadership().await.is_ok());
    back.shutdown().await;
    for s in &sites {
        if s.node.name() != follower.node.name() {
            s.node.shutdown().await;
        }
    }
}
