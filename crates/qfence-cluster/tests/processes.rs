//! Multi-process cluster tests. This test binary is its own node program: run with
//! `QFENCE_CHILD=1` it becomes one orchestrator (see [`child`]); otherwise it runs the stories:
//!
//! 1. `sigkill_the_leader_during_writes` (always): three processes on loopback, a stream of
//!    plan-state compare-and-sets, the leader killed with SIGKILL mid-stream; no acknowledged
//!    write may be lost, and the killed node, restarted, converges.
//! 2. `docker_partition` (when `QFENCE_DOCKER_TESTS=1`): the same binary in three containers
//!    built locally `FROM scratch`, one per site network plus a shared inter-site network; dc1
//!    is cut off with `docker network disconnect`, then healed.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Proc, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use qfence_call::{Call, Target, Verb};
use qfence_cluster::forward::{CallOutcome, NoopExecutor};
use qfence_cluster::node::{AdminClient, CallRequest, ClusterNode, NodeOptions, Timing};
use qfence_cluster::state::{Command, ControllerRecord, PlanStateDoc, Response};
use qfence_cluster::tls::{CertificateAuthority, NodeTls};
use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, SiteId};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if std::env::var_os("QFENCE_CHILD").is_some() {
        return runtime.block_on(child());
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .try_init();
    const STORIES: [&str; 2] = ["sigkill_the_leader_during_writes", "docker_partition"];
    // Speak enough of libtest's command line for cargo test and nextest: `--list --format
    // terse` lists the stories (none of them ignored), and a positional filter (with or
    // without `--exact`) picks which to run.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ignored = args.iter().any(|a| a == "--ignored");
    if args.iter().any(|a| a == "--list") {
        if !ignored {
            for name in STORIES {
                println!("{name}: test");
            }
        }
        return Ok(());
    }
    let exact = args.iter().any(|a| a == "--exact");
    let filter = args.iter().find(|a| !a.starts_with('-'));
    let mut failed = 0;
    let docker = std::env::var("QFENCE_DOCKER_TESTS").is_ok_and(|v| v == "1");
    let stories = STORIES
        .into_iter()
        .filter(|_| !ignored)
        .filter(|name| match filter {
            Some(f) if exact => name == f,
            Some(f) => name.contains(f.as_str()),
            None => true,
        })
        .map(|name| (name, name != "docker_partition" || docker));
    for (name, enabled) in stories {
        if !enabled {
            println!("test {name} ... skipped (set QFENCE_DOCKER_TESTS=1)");
            continue;
        }
        let started = Instant::now();
        let r = runtime.block_on(async {
            match name {
                "sigkill_the_leader_during_writes" => sigkill_the_leader_during_writes().await,
                _ => docker_partition().await,
            }
        });
        match r {
            Ok(()) => println!("test {name} ... ok ({:.1?})", started.elapsed()),
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED: {e:#}");
            }
        }
    }
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn step(s: &str) {
    println!("--- {s}");
}

/// Child mode: one orchestrator, configured by the environment, running until killed.
async fn child() -> anyhow::Result<()> {
    let env = |k: &str| std::env::var(k).with_context(|| format!("{k} is not set"));
    let dir = PathBuf::from(env("QFENCE_DIR")?);
    let name = OrchestratorId::new(env("QFENCE_NAME")?)?;
    let site = SiteId::new(env("QFENCE_SITE")?)?;
    let listen: SocketAddr = env("QFENCE_LISTEN")?.parse()?;
    let opts = NodeOptions {
        witness: site.as_str() == "witness",
        name,
        site,
        listen,
        advertise: std::env::var("QFENCE_ADVERTISE").ok(),
        tls: NodeTls::load(&dir.join("tls"))?,
        data_dir: dir.clone(),
        timing: Timing::fast(),
        admin_api: true,
    };
    let node = ClusterNode::start(opts, Arc::new(NoopExecutor)).await?;
    // Tell the harness where we listen (the port was chosen by the kernel).
    std::fs::write(dir.join("address.tmp"), &node.member().address)?;
    std::fs::rename(dir.join("address.tmp"), dir.join("address"))?;
    match std::env::var("QFENCE_MODE").as_deref() {
        Ok("init") => node.initialize().await?,
        Ok(m) if m.starts_with("join:") => {
            let seed = &m["join:".len()..];
            let deadline = Instant::now() + Duration::from_secs(30);
            while let Err(e) = node.join(seed).await {
                ensure!(Instant::now() < deadline, "joining through {seed}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        _ => {}
    }
    println!("READY");
    std::future::pending::<()>().await;
    Ok(())
}

struct Proc1 {
    name: String,
    site: String,
    dir: PathBuf,
    address: String,
    child: Option<Child>,
}

impl Proc1 {
    fn spawn(&mut self, mode: &str) -> anyhow::Result<()> {
        let exe = std::env::current_exe()?;
        let _ = std::fs::remove_file(self.dir.join("address"));
        let log = std::fs::File::create(self.dir.join("node.log"))?;
        let child = Proc::new(exe)
            .env("QFENCE_CHILD", "1")
            .env("QFENCE_DIR", &self.dir)
            .env("QFENCE_NAME", &self.name)
            .env("QFENCE_SITE", &self.site)
            .env("QFENCE_LISTEN", &self.address)
            .env("QFENCE_MODE", mode)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        // The first start binds port 0; a restart binds the same address again.
        let file = self.dir.join("address");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(a) = std::fs::read_to_string(&file) {
                self.address = a;
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "{} did not start", self.name);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGKILL: no shutdown path runs.
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc1 {
    fn drop(&mut self) {
        self.kill();
    }
}

fn dump_logs(procs: &[Proc1]) {
    for p in procs {
        let log = std::fs::read_to_string(p.dir.join("node.log")).unwrap_or_default();
        println!("== {} ({})", p.name, p.address);
        for l in log.lines().filter(|l| !l.starts_with(' ')).take(20) {
            println!("   {l}");
        }
    }
}

async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The address of whichever node says it is the leader, asking each in turn.
async fn find_leader(admin: &AdminClient, addresses: &[String]) -> Option<String> {
    for a in addresses {
        if let Ok(s) = admin.status(a).await
            && s.role == "leader"
        {
            return Some(a.clone());
        }
    }
    None
}

fn plan() -> PlanId {
    PlanId::new("erp-db").unwrap()
}

fn doc(generation: u64) -> PlanStateDoc {
    PlanStateDoc {
        schema: 1,
        generation: Generation(generation),
        body: json!({"owner": if generation.is_multiple_of(2) { "dc1" } else { "dc2" }, "n": generation}),
    }
}

async fn sigkill_the_leader_during_writes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = CertificateAuthority::generate("kill")?;
    let mut procs = Vec::new();
    for (name, site) in [
        ("orch-dc1", "dc1"),
        ("orch-dc2", "dc2"),
        ("orch-witness", "witness"),
    ] {
        let d = dir.path().join(name);
        ca.issue(name, &[])?.save(&d.join("tls"))?;
        procs.push(Proc1 {
            name: name.into(),
            site: site.into(),
            dir: d,
            address: "127.0.0.1:0".into(),
            child: None,
        });
    }
    let admin = AdminClient::new(&ca.issue("test-harness", &[])?, Duration::from_secs(2))?;

    step("Three processes form a cluster");
    procs[0].spawn("init")?;
    let seed = procs[0].address.clone();
    // One join at a time, as an operator would.
    for (i, voters) in [(1, 2), (2, 3)] {
        procs[i].spawn(&format!("join:{seed}"))?;
        wait_for(
            &format!("{voters} voters"),
            Duration::from_secs(30),
            async || {
                let s = admin.status(&seed).await.ok()?;
                (s.members.iter().filter(|m| m.voter).count() == voters).then_some(())
            },
        )
        .await
        .inspect_err(|_| dump_logs(&procs))?;
    }
    let addresses: Vec<String> = procs.iter().map(|p| p.address.clone()).collect();
    // Leadership may still move right after the joins: retry at whoever leads.
    let register = Command::RegisterPlan {
        plan: plan(),
        config: json!({}),
        initial_state: doc(0),
    };
    let (leader, r) = wait_for(
        "the plan to be registered",
        Duration::from_secs(10),
        async || {
            let leader = find_leader(&admin, &addresses).await?;
            let r = admin.write(&leader, &register).await.ok()?;
            Some((leader, r))
        },
    )
    .await?;
    ensure!(r == Response::Applied, "{r:?}");

    step("A stream of plan-state writes; the leader is killed with SIGKILL in the middle");
    let mut leader = leader;
    let mut generation = 0u64;
    let mut acknowledged = 0u64;
    let mut unknown = 0u64;
    let mut killed: Option<usize> = None;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        if killed.is_none() && started.elapsed() > Duration::from_millis(1500) {
            let i = addresses
                .iter()
                .position(|a| *a == leader)
                .context("leader not among the nodes")?;
            procs[i].kill();
            killed = Some(i);
            println!("killed {} at generation {generation}", procs[i].name);
        }
        let r = admin
            .write(
                &leader,
                &Command::PlanStateCas {
                    plan: plan(),
                    expected_generation: Generation(generation),
                    new_state: doc(generation + 1),
                },
            )
            .await;
        match r {
            Ok(Response::Applied) => {
                generation += 1;
                acknowledged = generation;
            }
            Ok(Response::Conflict { current, .. }) => {
                // An earlier write whose answer was lost did commit: continue from there.
                ensure!(
                    current.0 >= acknowledged,
                    "generation went back to {current}"
                );
                generation = current.0;
            }
            Ok(other) => bail!("unexpected response {other:?}"),
            Err(_) => {
                // Unknown outcome (the leader died or moved): find the leader and ask it.
                unknown += 1;
                let alive: Vec<String> = addresses
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| Some(*i) != killed)
                    .map(|(_, a)| a.clone())
                    .collect();
                leader = wait_for("a new leader", Duration::from_secs(10), async || {
                    find_leader(&admin, &alive).await
                })
                .await?;
            }
        }
    }
    ensure!(killed.is_some(), "the leader was never killed");
    println!("{acknowledged} writes acknowledged, {unknown} with unknown outcome");
    ensure!(
        acknowledged > 5,
        "too few writes to mean anything: {acknowledged}"
    );

    step("No acknowledged write is lost, and the killed node, restarted, converges");
    let killed = killed.unwrap_or(0);
    procs[killed].spawn("run")?;
    // Read the plan's generation through a compare-and-set that cannot match, at whoever leads.
    let probe = Command::PlanStateCas {
        plan: plan(),
        expected_generation: Generation(u64::MAX),
        new_state: doc(0),
    };
    let (leader, current) = wait_for("the leader's view", Duration::from_secs(10), async || {
        let leader = find_leader(&admin, &addresses).await?;
        match admin.write(&leader, &probe).await.ok()? {
            Response::Conflict { current, .. } => Some((leader, current.0)),
            _ => None,
        }
    })
    .await?;
    ensure!(
        current >= acknowledged,
        "acknowledged generation {acknowledged} but the cluster holds {current}"
    );
    let killed_addr = addresses[killed].clone();
    let leader_status = admin.status(&leader).await?;
    wait_for(
        "the restarted node to catch up",
        Duration::from_secs(15),
        async || {
            let s = admin.status(&killed_addr).await.ok()?;
            (s.last_applied >= leader_status.last_applied && s.plans == 1).then_some(())
        },
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Docker: three containers, per-site networks, a partition.

const IMAGE: &str = "qfence-cluster-test-node:local";
const WAN: &str = "qfence-cluster-test-wan";

fn docker(args: &[&str]) -> anyhow::Result<String> {
    let out = Proc::new("docker").args(args).output()?;
    if !out.status.success() {
        bail!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Builds the node image from this very binary and the shared libraries it needs, `FROM
/// scratch`: nothing is pulled.
fn build_image(work: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let root = work.join("rootfs");
    std::fs::create_dir_all(&root)?;
    std::fs::copy(&exe, root.join("qfence-node"))?;
    let ldd = Proc::new("ldd").arg(&exe).output()?;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = line
            .split("=>")
            .nth(1)
            .unwrap_or(line)
            .split_whitespace()
            .next()
            .unwrap_or("");
        if path.starts_with('/') {
            let target = root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(target.parent().context("lib path")?)?;
            std::fs::copy(path, &target).with_context(|| format!("copying {path}"))?;
        }
    }
    std::fs::create_dir_all(root.join("tmp"))?;
    std::fs::write(
        work.join("Dockerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/qfence-node\"]\n",
    )?;
    docker(&["build", "-q", "-t", IMAGE, &work.display().to_string()])?;
    Ok(())
}

struct Containers(Vec<String>, Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = docker(&["rm", "-f", c]);
        }
        for n in &self.1 {
            let _ = docker(&["network", "rm", n]);
        }
        let _ = docker(&["rmi", IMAGE]);
    }
}

fn container_ip(name: &str, network: &str) -> anyhow::Result<String> {
    docker(&[
        "inspect",
        "-f",
        &format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}"),
        name,
    ])
}

async fn docker_partition() -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    step("Build the node image from this binary, FROM scratch");
    build_image(work.path())?;
    let ca = CertificateAuthority::generate("docker")?;
    let nodes = [
        ("orch-dc1", "dc1"),
        ("orch-dc2", "dc2"),
        ("orch-witness", "witness"),
    ];
    let mut guard = Containers(Vec::new(), Vec::new());
    for net in [
        WAN,
        "qfence-cluster-test-dc1",
        "qfence-cluster-test-dc2",
        "qfence-cluster-test-witness",
    ] {
        let _ = docker(&["network", "rm", net]);
        docker(&["network", "create", net])?;
        guard.1.push(net.to_owned());
    }

    step("Three orchestrator containers, each on its site network and the inter-site network");
    for (i, (name, site)) in nodes.iter().enumerate() {
        let d = work.path().join(name);
        ca.issue(name, &[name.to_string()])?.save(&d.join("tls"))?;
        let _ = docker(&["rm", "-f", name]);
        let mode = if i == 0 {
            "init".to_owned()
        } else {
            "join:orch-dc1:7400".to_owned()
        };
        docker(&[
            "create",
            "--name",
            name,
            "--hostname",
            name,
            "--network",
            &format!("qfence-cluster-test-{site}"),
            "-e",
            "QFENCE_CHILD=1",
            "-e",
            "QFENCE_DIR=/data",
            "-e",
            &format!("QFENCE_NAME={name}"),
            "-e",
            &format!("QFENCE_SITE={site}"),
            "-e",
            "QFENCE_LISTEN=0.0.0.0:7400",
            "-e",
            &format!("QFENCE_ADVERTISE={name}:7400"),
            "-e",
            &format!("QFENCE_MODE={mode}"),
            "-e",
            "RUST_LOG=warn",
            IMAGE,
        ])?;
        guard.0.push(name.to_string());
        docker(&["cp", &d.display().to_string(), &format!("{name}:/data")])?;
        docker(&["network", "connect", "--alias", name, WAN, name])?;
        docker(&["start", name])?;
    }

    // The harness reaches each container at its inter-site address, under its name.
    let mut resolve = Vec::new();
    for (name, _) in &nodes {
        let ip = container_ip(name, WAN)?;
        resolve.push((
            name.to_string(),
            format!("{ip}:7400").parse::<SocketAddr>()?,
        ));
    }
    let harness = ca.issue("test-harness", &[])?;
    let admin = AdminClient::with_resolve(&harness, Duration::from_secs(2), &resolve)?;
    let addresses: Vec<String> = nodes.iter().map(|(n, _)| format!("{n}:7400")).collect();
    wait_for("three voters", Duration::from_secs(60), async || {
        let s = admin.status(&addresses[0]).await.ok()?;
        (s.members.iter().filter(|m| m.voter).count() == 3).then_some(())
    })
    .await?;
    let leader = wait_for("a leader", Duration::from_secs(10), async || {
        find_leader(&admin, &addresses).await
    })
    .await?;
    for c in [("pve-dc1", vec![]), ("bmc-dc1", vec!["dc2"])] {
        admin
            .write(
                &leader,
                &Command::RegisterController {
                    controller: ControllerRecord {
                        id: ControllerId::new(c.0)?,
                        site: SiteId::new("dc1")?,
                        reach: c
                            .1
                            .iter()
                            .map(|s| SiteId::new(*s))
                            .collect::<Result<_, _>>()?,
                        config: json!({"type": "noop"}),
                    },
                },
            )
            .await?;
    }
    admin
        .write(
            &leader,
            &Command::RegisterPlan {
                plan: plan(),
                config: json!({}),
                initial_state: doc(0),
            },
        )
        .await?;

    step("Cut dc1 off from the other sites");
    docker(&["network", "disconnect", WAN, "orch-dc1"])?;
    let others = addresses[1..].to_vec();
    let leader = wait_for(
        "a leader at dc2 or the witness",
        Duration::from_secs(20),
        async || {
            let l = find_leader(&admin, &others).await?;
            // It must also see dc1 as gone before routing can say so.
            let s = admin.status(&l).await.ok()?;
            s.members
                .iter()
                .any(|m| m.name.as_str() == "orch-dc1" && m.live == Some(false))
                .then_some(l)
        },
    )
    .await?;
    println!("leader after the cut: {leader}");

    step("dc1-only controllers read UNKNOWN; the one in reach of dc2 still works");
    let call = |c: &str| CallRequest {
        controller: ControllerId::new(c).unwrap(),
        plan: None,
        call: Call::new(
            Verb::Check,
            Target::controller(SiteId::new("dc1").unwrap()),
            Duration::from_secs(5),
        ),
    };
    let r = admin.call(&leader, &call("pve-dc1")).await?;
    ensure!(matches!(r, CallOutcome::Unknown { .. }), "pve-dc1: {r:?}");
    let r = admin.call(&leader, &call("bmc-dc1")).await?;
    ensure!(
        matches!(&r, CallOutcome::Done { by, .. } if by.as_str() == "orch-dc2"),
        "bmc-dc1: {r:?}"
    );
    let r = admin
        .write(
            &leader,
            &Command::PlanStateCas {
                plan: plan(),
                expected_generation: Generation(0),
                new_state: doc(1),
            },
        )
        .await?;
    ensure!(r == Response::Applied, "{r:?}");

    step("Heal: dc1 rejoins the network and converges");
    docker(&["network", "connect", "--alias", "orch-dc1", WAN, "orch-dc1"])?;
    let ip = container_ip("orch-dc1", WAN)?;
    let healed = AdminClient::with_resolve(
        &harness,
        Duration::from_secs(2),
        &[("orch-dc1".to_owned(), format!("{ip}:7400").parse()?)],
    )?;
    let leader_status = admin.status(&leader).await?;
    wait_for("dc1 to converge", Duration::from_secs(30), async || {
        let s = healed.status("orch-dc1:7400").await.ok()?;
        (s.last_applied >= leader_status.last_applied && s.leader.is_some()).then_some(())
    })
    .await?;
    let mut resolve = Vec::new();
    for (name, _) in &nodes {
        let ip = container_ip(name, WAN)?;
        resolve.push((
            name.to_string(),
            format!("{ip}:7400").parse::<SocketAddr>()?,
        ));
    }
    let admin = AdminClient::with_resolve(&harness, Duration::from_secs(2), &resolve)?;
    wait_for(
        "dc1's controllers to answer again",
        Duration::from_secs(20),
        async || {
            let leader = find_leader(&admin, &addresses).await?;
            let r = admin.call(&leader, &call("pve-dc1")).await.ok()?;
            matches!(&r, CallOutcome::Done { by, .. } if by.as_str() == "orch-dc1").then_some(())
        },
    )
    .await?;
    // Pre-vote: the isolated node could not raise the term, so healing disturbed nobody.
    let after = admin.status(&leader).await?;
    ensure!(
        after.term == leader_status.term && after.role == "leader",
        "healing changed leadership: term {} -> {}, role {}",
        leader_status.term,
        after.term,
        after.role
    );
    drop(guard);
    Ok(())
}
