//! `qfence lab`: the demo lab on loopback (see `docs/lab.md`), and `qfence lab
//! fail|heal|fault|fail-host|heal-host|state` against the running lab through its control
//! endpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use qfence_lab::lab::{ControlFile, FaultRequest, Lab, LabOptions, LabState};

use super::Format;

/// `qfence lab`
#[derive(Debug, Args)]
pub struct LabArgs {
    /// The lab directory: configuration, secrets, tokens, `env`, logs, orchestrator data.
    #[arg(long, global = true, default_value = ".qfence-lab")]
    pub dir: PathBuf,
    /// Also run a small OpenStack cloud for Instance HA: the Nova simulator with compute-1 to
    /// compute-4 and their BMCs (`qfence lab fail-host compute-2`).
    #[arg(long)]
    pub cloud: bool,
    #[command(subcommand)]
    pub command: Option<LabCommand>,
}

/// What to do with the running lab; without one, start it.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Cut a site off: its orchestrator frozen, its Proxmox API unreachable (its BMC stays
    /// reachable from the other site).
    Fail {
        /// dc1, dc2 or witness.
        site: String,
    },
    /// Undo `fail`: the site comes back (fenced, if it was fenced meanwhile).
    Heal {
        /// dc1, dc2 or witness.
        site: String,
    },
    /// Switch a demo fault on (or off with --off): slow-bmc, already-off-409,
    /// wrong-certificate, flapping-replication.
    Fault {
        name: String,
        /// The site whose simulator misbehaves.
        #[arg(long, default_value = "dc1")]
        site: String,
        /// Switch it off.
        #[arg(long)]
        off: bool,
    },
    /// Kill a compute host of the lab's cloud: its nova-compute stops reporting while it
    /// stays powered (a panic, a hang). Instance HA fences it, evacuates its servers and
    /// brings it back.
    FailHost {
        /// compute-1 to compute-4.
        host: String,
    },
    /// Start a failed compute host's nova-compute again by hand (while it is powered on).
    HealHost {
        /// compute-1 to compute-4.
        host: String,
    },
    /// Show the lab: failed sites, VIP, host power, VM 101, orchestrators, faults, the
    /// cloud's compute hosts.
    State,
}

/// Runs `qfence lab ...`.
pub fn run(a: LabArgs, format: Format) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match a.command {
        None => rt.block_on(serve_lab(a.dir, a.cloud)),
        Some(c) => rt.block_on(control(a.dir, c, format)),
    }
}

async fn serve_lab(dir: PathBuf, cloud: bool) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding the qfence executable")?;
    println!("Starting the qfence lab in {} ...", dir.display());
    let lab = Lab::start(LabOptions {
        dir: dir.clone(),
        exe,
        cloud,
    })
    .await?;
    let dir_shown = lab.dir.display().to_string();
    println!();
    println!(
        "The lab runs: dc1 owns erp-db (VM 101 at pve-dc1, VIP vip-erp-db -> 10.1.1.5), dc2 stands by fenced."
    );
    if let Some(cloud) = &lab.cloud {
        println!(
            "Instance HA watches the cloud overcloud (Nova {}): {} with {} servers, each host's BMC at {}.",
            cloud.nova.keystone_url(),
            cloud.hosts().join(", "),
            cloud.nova.snapshot().servers.len(),
            cloud.bmc.base_url()
        );
    }
    for o in &lab.orchestrators.list {
        println!(
            "  {:<10} {:<8} API {}  pin sha256:{}  (log {})",
            o.name,
            o.site,
            o.api_url(),
            o.pin,
            o.log.display()
        );
    }
    println!("Tokens (also in {dir_shown}/env for the operator):");
    println!("  viewer   {}", lab.tokens.viewer);
    println!("  operator {}", lab.tokens.operator);
    println!("  admin    {}", lab.tokens.admin);
    let dc2 = lab
        .orchestrators
        .get("dc2-a")
        .context("the lab has no dc2-a")?;
    println!();
    // dc2-a's console: it survives `lab fail dc1`, so the failover can be watched there.
    println!(
        "Console: {}/  (dc2-a; sign in with a token above. The browser will not know the lab's \
         own certificate: accept it after comparing its SHA-256 fingerprint with {})",
        dc2.api_url(),
        dc2.pin
    );
    println!();
    println!("Next, in a second terminal:");
    println!("  . {dir_shown}/env && qfence status --watch");
    println!(
        "    (or: qfence status --watch --api {} --pin sha256:{} --token {})",
        dc2.api_url(),
        dc2.pin,
        lab.tokens.operator
    );
    println!("  qfence lab fail dc1    # dc1 cut off: watch erp-db fail over to dc2");
    println!("  qfence lab heal dc1    # dc1 comes back, fenced");
    if lab.cloud.is_some() {
        println!(
            "  qfence lab fail-host compute-2    # a compute host dies: Instance HA fences it, evacuates its servers, brings it back"
        );
        println!("  qfence instance-ha hosts    # (and: qfence instance-ha evacuations)");
    } else {
        println!(
            "  (qfence lab --cloud also runs a small OpenStack cloud: qfence lab fail-host compute-2 shows Instance HA)"
        );
    }
    println!("Ctrl-C stops the lab.");
    super::serve::signal().await;
    println!("Stopping the lab ...");
    lab.stop().await;
    Ok(ExitCode::SUCCESS)
}

async fn control(dir: PathBuf, c: LabCommand, format: Format) -> anyhow::Result<ExitCode> {
    let path = ControlFile::path(&dir);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is `qfence lab --dir {}` running?)",
            path.display(),
            dir.display()
        )
    })?;
    let file: ControlFile =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    qfence_cluster::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .no_proxy()
        .build()?;
    let req =
        match &c {
            LabCommand::Fail { site } => client.post(format!("{}/fail/{site}", file.url)),
            LabCommand::Heal { site } => client.post(format!("{}/heal/{site}", file.url)),
            LabCommand::Fault { name, site, off } => client
                .post(format!("{}/fault", file.url))
                .json(&FaultRequest {
                    name: name.clone(),
                    site: site.clone(),
                    on: !off,
                }),
            LabCommand::FailHost { host } => client.post(format!("{}/fail-host/{host}", file.url)),
            LabCommand::HealHost { host } => client.post(format!("{}/heal-host/{host}", file.url)),
            LabCommand::State => client.get(format!("{}/state", file.url)),
        };
    let resp = req.bearer_auth(&file.token).send().await.with_context(|| {
        format!(
            "the lab's control endpoint {} (is the lab running?)",
            file.url
        )
    })?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        bail!("the lab refused ({status}): {body}");
    }
    let state: LabState = resp.json().await?;
    if format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&state)?);
        return Ok(ExitCode::SUCCESS);
    }
    match &c {
        LabCommand::Fail { site } => println!(
            "{site} is cut off: its orchestrator is frozen and its Proxmox API unreachable; its BMC stays reachable from the other site."
        ),
        LabCommand::Heal { site } => println!(
            "{site} is back: its orchestrator runs and its Proxmox API answers (a fenced host stays off until an operator gives the plan back)."
        ),
        LabCommand::Fault { name, site, off } => println!(
            "Fault {name} at {site} is {}.",
            if *off { "off" } else { "on" }
        ),
        LabCommand::FailHost { host } => println!(
            "{host} is dead: its nova-compute stopped reporting, its BMC still reads it powered on. Watch Instance HA fence and evacuate it: qfence instance-ha hosts, qfence instance-ha evacuations."
        ),
        LabCommand::HealHost { host } => {
            println!("{host}'s nova-compute reports again.");
        }
        LabCommand::State => {}
    }
    println!(
        "failed sites: {}",
        if state.failed.is_empty() {
            "none".to_owned()
        } else {
            state.failed.join(", ")
        }
    );
    println!("vip-erp-db -> {}", state.vip.join(", "));
    for (host, p) in &state.power {
        println!("host {host}: power {p}");
    }
    for (cluster, s) in &state.vm101 {
        println!("VM 101 at {cluster}: {s}");
    }
    for o in &state.orchestrators {
        println!(
            "{} ({}) {}{}",
            o.name,
            o.site,
            o.api,
            if o.frozen { " FROZEN" } else { "" }
        );
    }
    if !state.faults.is_empty() {
        println!("faults: {}", state.faults.join(", "));
    }
    for h in &state.cloud {
        println!(
            "{}: power {}, nova-compute {} (service {}{}{}), {} server(s), {} ACTIVE",
            h.host,
            h.power,
            if h.reporting { "reporting" } else { "silent" },
            h.service,
            if h.disabled { ", disabled" } else { "" },
            if h.forced_down { ", forced down" } else { "" },
            h.servers,
            h.active
        );
    }
    Ok(ExitCode::SUCCESS)
}
