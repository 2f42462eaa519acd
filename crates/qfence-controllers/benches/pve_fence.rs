//! Benchmark: time from "fence VM" to "VM verified stopped", qfence's Proxmox driver against
//! Debian's `fence_pve`, side by side on fakepve (`tools/emulators/start-pve-fakepve.sh`).
//!
//! `cargo bench -p qfence-controllers --bench pve_fence` (env: `QFENCE_BENCH_ROUNDS`, default
//! 10). Each round starts VM 100 again, then times one fence. Both sides include what one
//! fresh invocation costs: TLS handshake and, for ticket auth, the login; `fence_pve` also pays
//! its Python start-up (it runs as a process per fence, as Pacemaker runs it). Two fakepve
//! time scales are measured: 0 (tasks finish at once: protocol overhead only) and 0.1 (the
//! emulator's default pacing of a qmstop task).

// A benchmark measures real elapsed time on the machine's monotonic clock.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use qfence_controllers::driver::Build as _;
use qfence_controllers::proxmox;
use qfence_controllers::{CallContext, Driver, Target};
use qfence_model::config::{ControllerConfig, ControllerKind, ProxmoxAuth, TlsTrust};
use qfence_model::{ControllerId, OrchestratorId, SiteId};
use secrecy::SecretString;

struct RunDir(tempfile::TempDir);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(emulators().join("stop.sh"))
            .env("QFENCE_EMU_RUN", self.0.path())
            .output();
    }
}

fn emulators() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Pve {
    _run: RunDir,
    port: u16,
    control: String,
    cacert: String,
}

fn start(time_scale: &str) -> Result<Pve, String> {
    let run = RunDir(
        tempfile::Builder::new()
            .prefix("qbench")
            .tempdir_in("/tmp")
            .map_err(|e| e.to_string())?,
    );
    let (port, ctl) = (free_port(), free_port());
    let out = Command::new("bash")
        .arg(emulators().join("start-pve-fakepve.sh"))
        .env("QFENCE_EMU_RUN", run.0.path())
        .env("PVE_PORT", port.to_string())
        .env("PVE_CTL_PORT", ctl.to_string())
        .env("PVE_TIME_SCALE", time_scale)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let env: BTreeMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    Ok(Pve {
        port,
        control: env["PVE_CONTROL"].to_owned(),
        cacert: env["PVE_CACERT"].to_owned(),
        _run: run,
    })
}

fn driver(pve: &Pve, auth: ProxmoxAuth, secret: &str) -> proxmox::ProxmoxDriver {
    let config = ControllerConfig {
        site: SiteId::new("dc1").unwrap(),
        reach: vec![],
        secret: None,
        tls: TlsTrust::CaFile(pve.cacert.clone()),
        timeout: Duration::from_secs(10),
        kind: ControllerKind::Proxmox {
            endpoint: format!("https://127.0.0.1:{}", pve.port).parse().unwrap(),
            auth,
        },
    };
    proxmox::ProxmoxDriver::build(
        ControllerId::new("pve").unwrap(),
        &config,
        Some(SecretString::from(secret.to_owned())),
    )
    .unwrap()
}

async fn set_running(http: &reqwest::Client, pve: &Pve) {
    let r = http
        .post(format!("{}/vm/100/set?status=running", pve.control))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "min {:>7.1} ms  median {:>7.1} ms  max {:>7.1} ms",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1])
    )
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::var("QFENCE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    if !std::path::Path::new("/usr/sbin/fence_pve").exists() {
        eprintln!("fence_pve is not installed (tools/emulators/install.sh installs fence-agents)");
        std::process::exit(
            if std::env::var("QFENCE_SKIP_EMULATORS").is_ok_and(|v| v == "1") {
                0
            } else {
                1
            },
        );
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let target = Target {
        capability: "vm.stop".to_owned(),
        resource: "pve1/100".to_owned(),
        params: BTreeMap::new(),
        site: SiteId::new("dc1").unwrap(),
    };
    println!("vm.stop of VM 100 to verified stopped, {rounds} rounds each, fakepve on loopback");
    for scale in ["0", "0.1"] {
        let pve = match start(scale) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("cannot start fakepve: {e}");
                std::process::exit(1);
            }
        };
        let mut token = Vec::new();
        let mut ticket = Vec::new();
        let mut agent = Vec::new();
        let mut agent_status = Vec::new();
        for _ in 0..rounds {
            for (auth, secret, out) in [
                (
                    ProxmoxAuth::Token {
                        token_id: "root@pam!qfence".to_owned(),
                    },
                    "11111111-2222-3333-4444-555555555555",
                    &mut token,
                ),
                (
                    ProxmoxAuth::Ticket {
                        username: "root@pam".to_owned(),
                    },
                    "secret",
                    &mut ticket,
                ),
            ] {
                set_running(&http, &pve).await;
                let d = driver(&pve, auth, secret);
                let ctx = CallContext::with_timeout(
                    OrchestratorId::new("bench").unwrap(),
                    Duration::from_secs(60),
                );
                let t0 = Instant::now();
                let r = d.perform(&ctx, &target).await.expect("qfence vm.stop");
                out.push(t0.elapsed());
                assert!(r.holds, "{r:?}");
            }
            set_running(&http, &pve).await;
            let port = format!("--ipport={}", pve.port);
            let fence_pve = |action: &str| {
                Command::new("/usr/sbin/fence_pve")
                    .args([
                        "--ip=127.0.0.1",
                        &port,
                        "--username=root@pam",
                        "--password=secret",
                        "--ssl-insecure",
                        "--plug=100",
                        "--pve-node=pve1",
                        &format!("--action={action}"),
                    ])
                    .output()
                    .unwrap()
            };
            // Its fixed cost: Python start-up, login and one status read.
            let t0 = Instant::now();
            let st = fence_pve("status");
            agent_status.push(t0.elapsed());
            assert!(
                st.status.success(),
                "fence_pve status: {}",
                String::from_utf8_lossy(&st.stdout)
            );
            let t0 = Instant::now();
            let st = fence_pve("off");
            agent.push(t0.elapsed());
            assert!(
                st.status.success(),
                "fence_pve: {}",
                String::from_utf8_lossy(&st.stdout)
            );
        }
        println!("fakepve PVE_TIME_SCALE={scale}:");
        println!("  qfence vm.stop (API token)     {}", stats(token));
        println!("  qfence vm.stop (ticket login)  {}", stats(ticket));
        println!("  fence_pve -o off (ticket)      {}", stats(agent));
        println!("  fence_pve -o status (baseline) {}", stats(agent_status));
    }
}
