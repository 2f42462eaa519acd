//! `qfence plan ...`: availability plans, read from a configuration file.
//!
//! `plan show` draws a plan as the tree an operator reasons about: the plan, each site's
//! instance, its bindings in order, the controller each one acts through and the secret that
//! controller names (by reference only: no secret is ever read here).

use qfence_core::dry_run::MoveKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use qfence_model::config::{
    Binding, ControllerConfig, ControllerKind, Issue, PlanConfig, Severity, StandbyPosture,
    TlsTrust, ValidatedConfig,
};
use serde_json::{Value, json};

use super::Format;

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Show a plan: its instances, bindings, controllers and secret references. With
    /// `--format mermaid`, a flowchart; with `--format json`, the same for scripts.
    Show {
        /// The configuration file (YAML).
        file: PathBuf,
        /// The plan's name.
        plan: String,
    },
    /// Print the whole ordered action list of a failover of PLAN to SITE, offline: each step
    /// with its controller, capability, resource and the sites allowed to run it. Every check
    /// is assumed to hold except the readings given with --assume.
    DryRun {
        /// The configuration file (YAML).
        file: PathBuf,
        /// The plan's name.
        plan: String,
        /// The site to fail over to.
        #[arg(long = "to", value_name = "SITE")]
        to: String,
        /// A reading to assume instead of success, as SITE[INDEX]=READING (fenced, failed,
        /// unknown, ...), e.g. `dc1[0]=unknown` when dc1's BMC does not answer. Repeatable.
        #[arg(long = "assume", value_name = "BINDING=READING")]
        assume: Vec<String>,
        /// A planned switchover (the target's readiness first, then the owner fenced in
        /// order) instead of a failover.
        #[arg(long)]
        switchover: bool,
    },
}

pub fn run(command: PlanCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        PlanCommand::Show { file, plan } => show(&file, &plan, format),
        PlanCommand::DryRun {
            file,
            plan,
            to,
            assume,
            switchover,
        } => {
            if let Some(code) = super::only(format, &[Format::Human, Format::Json], "plan dry-run")
            {
                return Ok(code);
            }
            let code = super::dry_run::run(
                &file,
                &plan,
                &to,
                &assume,
                if switchover {
                    MoveKind::Switchover
                } else {
                    MoveKind::Failover
                },
                format == Format::Json,
            )?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
    }
}

fn show(file: &Path, name: &str, format: Format) -> anyhow::Result<ExitCode> {
    let loaded = match super::load(file, format) {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let config = &loaded.config;
    if format == Format::Human && !loaded.warnings.is_empty() {
        eprintln!(
            "{}: {} warning(s); `qfence config check` lists them",
            file.display(),
            loaded.warnings.len()
        );
    }
    let Some(plan) = config.plan(name) else {
        let plans: Vec<&str> = config.config().plans.keys().map(|p| p.as_str()).collect();
        let issue = Issue {
            path: format!("plans.{name}"),
            message: format!(
                "no such plan; plans: {}",
                if plans.is_empty() {
                    "(none)".to_owned()
                } else {
                    plans.join(", ")
                }
            ),
            severity: Severity::Error,
            line: None,
        };
        super::print_issues(&file.display().to_string(), &[issue], format);
        return Ok(ExitCode::from(super::EXIT_INVALID));
    };
    let out = match format {
        Format::Human => human(config, name, plan),
        Format::Json => serde_json::to_string_pretty(&to_json(config, name, plan))?,
        Format::Mermaid => mermaid(config, name, plan),
    };
    println!("{}", out.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// Seconds as written in configuration: `10s`, `0.5s`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}

/// The plan's parts in display order: each site's instance, then the service list.
fn groups(plan: &PlanConfig) -> Vec<(String, Option<&str>, &[Binding])> {
    let mut out: Vec<(String, Option<&str>, &[Binding])> = plan
        .instances
        .iter()
        .map(|(site, b)| {
            (
                format!("instance at {site}"),
                Some(site.as_str()),
                b.as_slice(),
            )
        })
        .collect();
    if !plan.service.is_empty() {
        out.push(("service".to_owned(), None, plan.service.as_slice()));
    }
    out
}

/// How a binding reads: `fence, required (compute; unfence power.on)`.
fn role_text(config: &ValidatedConfig, b: &Binding) -> String {
    let spec = config.capability(b);
    let controller = config.controller(b.controller.as_str()).expect("validated");
    let mut s = b.role.to_string();
    if b.required {
        s.push_str(", required");
    }
    if b.role == qfence_model::Role::Fence
        && let Some(level) = controller.fence_level(spec)
    {
        let _ = write!(s, " ({level}");
        if let Some(u) = spec.unfence {
            let _ = write!(s, "; unfence {u}");
        }
        s.push(')');
    }
    s
}

fn params_text(b: &Binding) -> String {
    if b.params.is_empty() {
        return String::new();
    }
    let p: Vec<String> = b.params.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!(" {{{}}}", p.join(", "))
}

fn endpoint(c: &ControllerConfig) -> String {
    match &c.kind {
        ControllerKind::Redfish { endpoint, .. }
        | ControllerKind::Proxmox { endpoint, .. }
        | ControllerKind::Fortigate { endpoint, .. }
        | ControllerKind::Docker { endpoint }
        | ControllerKind::Postgres { endpoint, .. }
        | ControllerKind::Nova { endpoint, .. } => endpoint.to_string(),
        ControllerKind::Ipmi { endpoint, .. } => endpoint.clone(),
        ControllerKind::FenceAgent { agent, .. } => format!("agent {agent}"),
        ControllerKind::Agent => "host agents".to_owned(),
    }
}

fn tls_text(t: &TlsTrust) -> String {
    match t {
        TlsTrust::SystemRoots => "system roots".to_owned(),
        TlsTrust::CaFile(f) => format!("ca_file {f}"),
        TlsTrust::Pin(p) => format!("pin sha256:{}…", &p[..p.len().min(12)]),
        TlsTrust::Insecure => "INSECURE (any certificate)".to_owned(),
    }
}

fn where_text(c: &ControllerConfig) -> String {
    let mut s = format!("{}, site {}", c.controller_type(), c.site);
    if !c.reach.is_empty() {
        let r: Vec<&str> = c.reach.iter().map(|s| s.as_str()).collect();
        let _ = write!(s, ", reach {}", r.join(", "));
    }
    s
}

fn human(config: &ValidatedConfig, name: &str, plan: &PlanConfig) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "plan {name}: owner {}, interval {}, health bad {} → failover{}, fence timeout {}{}",
        plan.owner,
        secs(plan.interval),
        secs(plan.failover_after),
        if plan.auto_failover {
            ""
        } else {
            " (advice only: auto_failover off)"
        },
        secs(plan.fence_timeout),
        // Only said when hot: a cold standby is what every plan had before.
        if plan.standby == StandbyPosture::Hot {
            ", hot standbys (judged by their standby bindings)"
        } else {
            ""
        },
    );
    let groups = groups(plan);
    for (gi, (title, _, bindings)) in groups.iter().enumerate() {
        let last_group = gi + 1 == groups.len();
        let _ = writeln!(
            o,
            "{}{title}",
            if last_group {
                "└── "
            } else {
                "├── "
            }
        );
        let stem = if last_group { "    " } else { "│   " };
        for (i, b) in bindings.iter().enumerate() {
            let last = i + 1 == bindings.len();
            let c = config.controller(b.controller.as_str()).expect("validated");
            let _ = writeln!(
                o,
                "{stem}{}[{i}] {} {}{}  {}",
                if last { "└── " } else { "├── " },
                b.capability,
                b.resource,
                params_text(b),
                role_text(config, b),
            );
            let inner = if last { "    " } else { "│   " };
            let secret = c
                .secret
                .as_ref()
                .map_or("no secret".to_owned(), |s| format!("secret {s}"));
            let _ = writeln!(
                o,
                "{stem}{inner}    via {} ({}) → {secret}",
                b.controller,
                where_text(c)
            );
        }
    }
    let _ = writeln!(o, "\ncontrollers:");
    for (id, c) in used_controllers(config, plan) {
        let secret = c.secret.as_ref().map_or("-".to_owned(), |s| s.to_string());
        let _ = writeln!(
            o,
            "  {id}: {} at {}; secret {secret}; tls {}; timeout {}",
            where_text(c),
            endpoint(c),
            tls_text(&c.tls),
            secs(c.timeout)
        );
    }
    o
}

fn used_controllers<'a>(
    config: &'a ValidatedConfig,
    plan: &'a PlanConfig,
) -> BTreeMap<&'a str, &'a ControllerConfig> {
    plan.instances
        .values()
        .flatten()
        .chain(&plan.service)
        .map(|b| {
            let id = b.controller.as_str();
            (id, config.controller(id).expect("validated"))
        })
        .collect()
}

fn binding_json(config: &ValidatedConfig, i: usize, b: &Binding) -> Value {
    let spec = config.capability(b);
    let c = config.controller(b.controller.as_str()).expect("validated");
    json!({
        "index": i,
        "controller": b.controller,
        "capability": b.capability,
        "resource": b.resource,
        "role": b.role,
        "required": b.required,
        "level": c.fence_level(spec),
        "unfence": spec.unfence,
        "params": b.params,
    })
}

fn to_json(config: &ValidatedConfig, name: &str, plan: &PlanConfig) -> Value {
    let instances: Vec<Value> = plan
        .instances
        .iter()
        .map(|(site, bindings)| {
            json!({
                "site": site,
                "bindings": bindings.iter().enumerate().map(|(i, b)| binding_json(config, i, b)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let service: Vec<Value> = plan
        .service
        .iter()
        .enumerate()
        .map(|(i, b)| binding_json(config, i, b))
        .collect();
    let controllers: serde_json::Map<String, Value> = used_controllers(config, plan)
        .into_iter()
        .map(|(id, c)| {
            (
                id.to_owned(),
                json!({
                    "type": c.controller_type(),
                    "endpoint": endpoint(c),
                    "site": c.site,
                    "reach": c.reach,
                    "secret": c.secret,
                    "tls": c.tls,
                    "timeout_seconds": c.timeout.as_secs_f64(),
                }),
            )
        })
        .collect();
    let mut out = json!({
        "plan": name,
        "owner": plan.owner,
        "priority": plan.priority,
        "interval_seconds": plan.interval.as_secs_f64(),
        "freshness_seconds": plan.freshness.as_secs_f64(),
        "recovery_after_seconds": plan.recovery_after.as_secs_f64(),
        "max_recoveries": plan.max_recoveries,
        "failover_after_seconds": plan.failover_after.as_secs_f64(),
        "fence_timeout_seconds": plan.fence_timeout.as_secs_f64(),
        "max_retries": plan.max_retries,
        "unfence_on_promote": plan.unfence_on_promote,
        "auto_failover": plan.auto_failover,
        "standby": plan.standby.as_str(),
        "instances": instances,
        "service": service,
        "controllers": controllers,
    });
    if let Some(n) = plan.failover_after_definitive {
        out["failover_after_definitive"] = json!(n);
    }
    out
}

/// Text safe inside a mermaid `"..."` label.
fn label(s: &str) -> String {
    s.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

/// The plan as a mermaid flowchart, in the shape of the controllers-and-bindings diagram:
/// plan → instances → bindings → controllers → secrets.
fn mermaid(config: &ValidatedConfig, name: &str, plan: &PlanConfig) -> String {
    let mut o = String::from("flowchart TB\n");
    let _ = writeln!(o, "  plan[\"Plan<br/>{}\"]", label(name));
    let controllers: Vec<&str> = used_controllers(config, plan).into_keys().collect();
    let cid = |id: &str| {
        format!(
            "c{}",
            controllers.iter().position(|c| *c == id).unwrap_or(0)
        )
    };
    for (gi, (_, site, bindings)) in groups(plan).iter().enumerate() {
        let g = format!("g{gi}");
        let heading = match site {
            Some(site) => format!("Instance at {site}"),
            None => "Service".to_owned(),
        };
        let _ = writeln!(o, "  plan --> {g}[\"{}\"]", label(&heading));
        for (i, b) in bindings.iter().enumerate() {
            let n = format!("{g}b{i}");
            let _ = writeln!(
                o,
                "  {g} --> {n}[\"{}<br/>{}<br/>{}\"]",
                label(&b.capability),
                label(&role_text(config, b)),
                label(&b.resource)
            );
            let _ = writeln!(o, "  {n} --> {}", cid(b.controller.as_str()));
        }
    }
    let mut secrets: Vec<&str> = Vec::new();
    for (i, id) in controllers.iter().enumerate() {
        let c = config.controller(id).expect("validated");
        let _ = writeln!(
            o,
            "  c{i}[\"Controller<br/>{}<br/>{}\"]",
            label(id),
            label(&where_text(c))
        );
        if let Some(s) = &c.secret {
            let si = match secrets.iter().position(|x| *x == s.as_str()) {
                Some(si) => si,
                None => {
                    secrets.push(s.as_str());
                    let si = secrets.len() - 1;
                    let _ = writeln!(o, "  s{si}[(\"Secret<br/>{}\")]", label(s.as_str()));
                    si
                }
            };
            let _ = writeln!(o, "  c{i} --> s{si}");
        }
    }
    o
}
