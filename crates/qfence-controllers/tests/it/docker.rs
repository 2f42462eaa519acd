//! The Docker driver against the real Docker Engine on this machine (`/var/run/docker.sock`,
//! or `QFENCE_DOCKER_SOCKET`), with a test image built locally FROM scratch holding a static
//! busybox (Debian's `busybox-static`): nothing is pulled.
//!
//! Without an engine these tests fail with a message saying so, unless
//! `QFENCE_SKIP_EMULATORS=1`. Every test uses its own container name and removes it.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use qfence_controllers::docker::{self, DockerDriver};
use qfence_controllers::driver::Build as _;
use qfence_controllers::{CallContext, Driver, ErrorKind, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId, Verdict};

const IMAGE: &str = "qfence-test-busybox:1";

fn socket() -> String {
    std::env::var("QFENCE_DOCKER_SOCKET").unwrap_or_else(|_| "/var/run/docker.sock".to_owned())
}

/// The docker CLI, talking to the same engine as the driver.
fn docker_cli() -> Command {
    let mut c = Command::new("docker");
    c.env("DOCKER_HOST", format!("unix://{}", socket()));
    c
}

fn skip() -> bool {
    std::env::var("QFENCE_SKIP_EMULATORS").is_ok_and(|v| v == "1")
}

/// Checks the engine and builds the test image. `false` means skip (only when allowed).
fn engine_ready() -> bool {
    let ok = std::path::Path::new(&socket()).exists()
        && docker_cli()
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            skip(),
            "the Docker Engine is not reachable at {} (or the docker CLI is missing): these tests \
             need it. Set QFENCE_SKIP_EMULATORS=1 to skip them.",
            socket()
        );
        eprintln!("skipped: no Docker Engine (QFENCE_SKIP_EMULATORS=1)");
        return false;
    }
    build_image();
    true
}

/// Builds the image FROM scratch with a static busybox. Its HEALTHCHECK passes while
/// /tmp/healthy exists, which the command creates at every start.
fn build_image() {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| {
            panic!("a static busybox is needed for the test image: apt-get install busybox-static")
        });
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(busybox, dir.path().join("busybox")).unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        r#"FROM scratch
COPY busybox /bin/busybox
HEALTHCHECK --interval=1s --timeout=1s --retries=1 CMD ["/bin/busybox", "test", "-f", "/tmp/healthy"]
CMD ["/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /tmp; /bin/busybox touch /tmp/healthy; exec /bin/busybox sleep 100000"]
"#,
    )
    .unwrap();
    // The classic builder needs nothing from a registry for FROM scratch.
    let out = docker_cli()
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", IMAGE])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A container that is removed when the test ends.
struct Container(String);

impl Container {
    fn run(test: &str, extra: &[&str]) -> Self {
        let name = format!("qfence-test-{test}-{}", std::process::id());
        let _ = docker_cli().args(["rm", "-f", &name]).output();
        let out = docker_cli()
            .args(["run", "-d", "--name", &name])
            .args(extra)
            .arg(IMAGE)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self(name)
    }

    fn inspect(&self, format: &str) -> String {
        let out = docker_cli()
            .args(["inspect", "--format", format, &self.0])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    fn health(&self) -> String {
        self.inspect("{{.State.Health.Status}}")
    }

    async fn wait_health(&self, want: &str) {
        for _ in 0..100 {
            if self.health() == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} never became {want} (is {})", self.0, self.health());
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker_cli().args(["rm", "-f", &self.0]).output();
    }
}

fn driver_at(endpoint: &str) -> DockerDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::SystemRoots,
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Docker {
            endpoint: endpoint.parse().unwrap(),
        },
    };
    docker::DockerDriver::build(ControllerId::new("docker-dc1").unwrap(), &config, None).unwrap()
}

fn driver() -> DockerDriver {
    driver_at(&format!("unix://{}", socket()))
}

fn ctx() -> CallContext {
    CallContext::with_timeout(
        OrchestratorId::new("orc-dc1").unwrap(),
        Duration::from_secs(20),
    )
}

fn target(cap: &str, c: &Container) -> Target {
    Target {
        capability: cap.to_owned(),
        resource: c.0.clone(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    }
}

#[tokio::test]
async fn probe_reads_the_engine_id_and_changes_nothing() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("probe", &[]);
    let started = c.inspect("{{.State.StartedAt}}");
    let p = driver().probe(&ctx()).await.unwrap();
    let out = docker_cli()
        .args(["info", "--format", "{{.ID}}"])
        .output()
        .unwrap();
    assert_eq!(p.identity.id, String::from_utf8_lossy(&out.stdout).trim());
    assert!(p.identity.facts.contains_key("server_version"), "{p:?}");
    assert_eq!(p.grades.len(), 3);
    assert!(p.grades.iter().all(|g| g.grade == Grade::Proven), "{p:?}");
    assert!(c.running());
    assert_eq!(
        c.inspect("{{.State.StartedAt}}"),
        started,
        "a probe must not restart anything"
    );
}

#[tokio::test]
async fn container_stop_is_verified_idempotent_and_undone() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("stop", &[]);
    let d = driver();
    let t = target("container.stop", &c);
    let before = d.check(&ctx(), &t).await.unwrap();
    assert_eq!(before.verdict(), Verdict::Failed, "{before:?}");

    let r = d.perform(&ctx(), &t).await.unwrap();
    assert!(r.holds, "{r:?}");
    assert!(r.detail.contains("Running=false"), "{}", r.detail);
    assert!(!c.running());

    // Already stopped: success, and nothing changes.
    let finished = c.inspect("{{.State.FinishedAt}}");
    assert!(d.perform(&ctx(), &t).await.unwrap().holds);
    assert_eq!(c.inspect("{{.State.FinishedAt}}"), finished);

    let u = d.undo(&ctx(), &t).await.unwrap();
    assert!(!u.holds && u.detail.contains("Running=true"), "{u:?}");
    assert!(c.running());
}

#[tokio::test]
async fn a_fenced_container_stays_down_despite_restart_always() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("restart-always", &["--restart", "always"]);
    let d = driver();
    let t = target("container.stop", &c);
    assert!(d.perform(&ctx(), &t).await.unwrap().holds);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let r = d.check(&ctx(), &t).await.unwrap();
    assert!(r.holds, "the daemon restarted a fenced container: {r:?}");
}

#[tokio::test]
async fn health_follows_the_healthcheck_and_start_restarts_an_unhealthy_container() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("health", &[]);
    let d = driver();
    let h = target("container.health", &c);
    c.wait_health("healthy").await;
    assert!(d.check(&ctx(), &h).await.unwrap().holds);

    let out = docker_cli()
        .args(["exec", &c.0, "/bin/busybox", "rm", "/tmp/healthy"])
        .output()
        .unwrap();
    assert!(out.status.success());
    c.wait_health("unhealthy").await;
    let r = d.check(&ctx(), &h).await.unwrap();
    assert!(!r.holds && r.detail.contains("unhealthy"), "{r:?}");

    // Recovery: start on a running but unhealthy container restarts it.
    let started = c.inspect("{{.State.StartedAt}}");
    let s = d
        .perform(&ctx(), &target("container.start", &c))
        .await
        .unwrap();
    assert!(s.holds, "{s:?}");
    assert_ne!(
        c.inspect("{{.State.StartedAt}}"),
        started,
        "it was restarted"
    );
    c.wait_health("healthy").await;
    assert!(d.check(&ctx(), &h).await.unwrap().holds);

    // Healthy and running: start does nothing.
    let started = c.inspect("{{.State.StartedAt}}");
    assert!(
        d.perform(&ctx(), &target("container.start", &c))
            .await
            .unwrap()
            .holds
    );
    assert_eq!(c.inspect("{{.State.StartedAt}}"), started);

    let e = d.perform(&ctx(), &h).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

#[tokio::test]
async fn discovery_and_binding_checks_name_real_containers() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("discover", &[]);
    let d = driver();
    let found = d.discover(&ctx()).await.unwrap();
    for cap in ["container.stop", "container.start", "container.health"] {
        assert!(
            found
                .iter()
                .any(|f| f.capability == cap && f.resource == c.0),
            "{cap} {found:?}"
        );
    }
    assert!(
        d.check_binding(&ctx(), &target("container.stop", &c))
            .await
            .unwrap()
            .is_empty()
    );
    let mut t = target("container.stop", &c);
    t.resource = format!("{}-missing", c.0);
    let p = d.check_binding(&ctx(), &t).await.unwrap();
    assert!(p[0].contains("does not exist"), "{p:?}");
    let e = d.check(&ctx(), &t).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
}

#[tokio::test]
async fn unreachable_and_silent_daemons_give_unknown_within_the_deadline() {
    // No engine needed: a missing socket, and a socket that accepts but never answers.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock");
    let t = Target {
        capability: "container.stop".to_owned(),
        resource: "x".to_owned(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    };
    let r = driver_at(&format!("unix://{}", missing.display()))
        .check(&ctx(), &t)
        .await;
    assert_eq!(
        r.as_ref().unwrap_err().kind,
        ErrorKind::Unreachable,
        "{r:?}"
    );
    assert_eq!(
        qfence_controllers::driver::fence_verdict(&r),
        Verdict::Unknown
    );

    let silent = dir.path().join("silent.sock");
    let listener = tokio::net::UnixListener::bind(&silent).unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let c = CallContext::with_timeout(
        OrchestratorId::new("o").unwrap(),
        Duration::from_millis(300),
    );
    let start = std::time::Instant::now();
    let e = driver_at(&format!("unix://{}", silent.display()))
        .perform(&c, &t)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(e.state_unknown);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    hold.abort();
}

#[test]
fn build_refuses_plain_tcp_and_does_no_io() {
    let config = |endpoint: &str, tls| ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls,
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Docker {
            endpoint: endpoint.parse().unwrap(),
        },
    };
    let id = ControllerId::new("d").unwrap();
    let e = docker::DockerDriver::build(
        id.clone(),
        &config("http://10.0.0.1:2375", TlsTrust::SystemRoots),
        None,
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(
        docker::DockerDriver::build(
            id.clone(),
            &config("https://10.0.0.1:2376", TlsTrust::SystemRoots),
            None
        )
        .is_err()
    );
    let tls = TlsTrust::CaFile("/nonexistent/ca.pem".to_owned());
    assert!(
        docker::DockerDriver::build(id.clone(), &config("https://10.0.0.1:2376", tls), None)
            .is_ok()
    );
    assert!(
        docker::DockerDriver::build(
            id,
            &config("unix:///nonexistent.sock", TlsTrust::SystemRoots),
            None
        )
        .is_ok()
    );
}

#[tokio::test]
async fn docker_passes_the_compliance_suite_against_the_engine() {
    if !engine_ready() {
        return;
    }
    let c = Container::run("compliance", &[]);
    let case = crate::compliance::Case {
        driver: driver(),
        fence: crate::compliance::target("container.stop", &c.0),
        missing: Some(crate::compliance::target(
            "container.stop",
            "qfence-test-no-such-container",
        )),
        action_timeout: Duration::from_secs(20),
        slow_fence: false,
    };
    crate::compliance::run(case).await;
    assert!(
        c.running(),
        "the suite ends with the container started again"
    );
}
