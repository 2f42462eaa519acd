//! Registering a controller: the four steps, run from one orchestrator.
//!
//! 1. **Configuration**: the controller's type has a driver here, its connection settings
//!    build, and this orchestrator's site is the controller's site or in its reach.
//! 2. **Secret**: the secret reference resolves from this orchestrator's own stores.
//! 3. **Connectivity**: a probe reads the target's identity (and, for TLS targets, the
//!    certificate fingerprint to compare and pin); another controller with the same identity,
//!    or the same endpoint, is warned of.
//! 4. **Capabilities**: each catalog capability is graded proven, inferred, unverifiable or
//!    failed (a failed capability cannot be bound by any plan; the others go on), then every
//!    binding that names this controller is checked against the bound resource.
//!
//! Nothing here fences, starts or stops anything: probes and binding checks are read-only by
//! the driver contract. A later step runs only when the earlier ones allow it; the report says
//! which were skipped and why.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::catalog::SecretUse;
use qfence_model::config::{Binding, ControllerConfig, ControllerKind, TlsTrust, ValidatedConfig};
use qfence_model::{ControllerId, Grade, OrchestratorId, SiteId};

pub use qfence_call::{BindingCheck, Report, Step, StepStatus};

use crate::any::AnyDriver;
use crate::driver::{CallContext, Discovered, Driver, Probe, Target};
use crate::secrets::{Secret, SecretStore};

/// What registration runs with.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    pub config: &'a ValidatedConfig,
    pub controller: &'a ControllerId,
    /// The orchestrator running the test; calls go out from its site.
    pub orchestrator: &'a OrchestratorId,
    pub secrets: &'a SecretStore,
    /// The identities of the other registered controllers (from the cluster state), to warn
    /// of duplicates. The command line has none and compares endpoints instead.
    pub known: &'a BTreeMap<ControllerId, String>,
    /// The deadline of each call.
    pub timeout: Duration,
}

fn endpoint_of(kind: &ControllerKind) -> Option<String> {
    let url = match kind {
        ControllerKind::Redfish { endpoint, .. }
        | ControllerKind::Proxmox { endpoint, .. }
        | ControllerKind::Fortigate { endpoint, .. }
        | ControllerKind::Docker { endpoint }
        | ControllerKind::Postgres { endpoint, .. }
        | ControllerKind::Nova { endpoint, .. } => endpoint,
        ControllerKind::Ipmi { endpoint, .. } => return Some(endpoint.clone()),
        // The agents come to the orchestrators: there is no address to compare.
        ControllerKind::Agent => return None,
        // A fence agent driving a BMC that another controller also drives is worth a warning
        // too, so it is compared by the device's address alone.
        ControllerKind::FenceAgent { options, .. } => {
            let host = options.get("ip").or_else(|| options.get("ipaddr"))?;
            let port = options.get("ipport")?;
            return Some(format!("{host}:{port}"));
        }
    };
    Some(format!(
        "{}:{}",
        url.host_str().unwrap_or(url.as_str()),
        url.port_or_known_default().unwrap_or(0)
    ))
}

fn step(number: u8, name: &str, status: StepStatus) -> Step {
    Step {
        number,
        name: name.into(),
        status,
        notes: vec![],
    }
}

/// Marks the step failed with why.
fn fail(s: &mut Step, note: String) {
    s.status = StepStatus::Failed;
    s.notes.push(note);
}

/// Adds a warning both to the step and to the report's list (a warning lowers an Ok step to
/// Warning, never a Failed one).
fn warn(s: &mut Step, warnings: &mut Vec<String>, note: String) {
    warnings.push(note.clone());
    s.notes.push(note);
    if s.status == StepStatus::Ok {
        s.status = StepStatus::Warning;
    }
}

/// Steps 1 and 2: the driver, built with the secret resolved here. On failure, the steps
/// say why.
fn build(reg: &Registration<'_>, steps: &mut Vec<Step>) -> (Option<AnyDriver>, Option<SiteId>) {
    let mut s1 = step(1, "configuration", StepStatus::Ok);
    let mut s2 = step(2, "secret", StepStatus::Skipped);
    let Some(cc) = reg.config.controller(reg.controller.as_str()) else {
        let names: Vec<&str> = reg
            .config
            .config()
            .controllers
            .keys()
            .map(|k| k.as_str())
            .collect();
        fail(
            &mut s1,
            format!(
                "there is no controller {:?} (there are: {})",
                reg.controller.as_str(),
                names.join(", ")
            ),
        );
        steps.extend([s1, s2]);
        return (None, None);
    };
    let site = check_configuration(reg, cc, &mut s1);
    if s1.status == StepStatus::Failed {
        steps.extend([s1, s2]);
        return (None, site);
    }
    let secret = resolve_secret(reg, cc, &mut s2);
    let driver = if s2.status == StepStatus::Ok {
        match AnyDriver::build(reg.controller, cc, secret) {
            Ok(d) => Some(d),
            Err(e) => {
                fail(&mut s2, e.to_string());
                None
            }
        }
    } else {
        None
    };
    steps.extend([s1, s2]);
    (driver, site)
}

/// Step 1: this orchestrator may call the controller, and its connection settings build.
/// Returns this orchestrator's site (the report names it even when the step fails).
fn check_configuration(
    reg: &Registration<'_>,
    cc: &ControllerConfig,
    s1: &mut Step,
) -> Option<SiteId> {
    let site = reg
        .config
        .config()
        .orchestrators
        .get(reg.orchestrator)
        .map(|o| o.site.clone());
    match &site {
        None => fail(
            s1,
            format!("there is no orchestrator {:?}", reg.orchestrator.as_str()),
        ),
        Some(site) if !cc.callable_from(site) => fail(
            s1,
            format!(
                "orchestrator {} is at site {site}, which may not call this controller (allowed: {})",
                reg.orchestrator,
                cc.allowed_sites()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(site) => s1.notes.push(format!(
            "type {}, site {}, callable from {site}",
            cc.controller_type(),
            cc.site
        )),
    }
    // A dry build checks the connection settings without the secret.
    if let Err(e) = AnyDriver::build(reg.controller, cc, Some(Secret::new(String::new()))) {
        fail(s1, e.to_string());
    }
    match &cc.tls {
        TlsTrust::Insecure => {
            s1.notes
                .push(crate::tls::insecure_warning(reg.controller.as_str()));
            if s1.status == StepStatus::Ok {
                s1.status = StepStatus::Warning;
            }
        }
        TlsTrust::Pin(p) => s1.notes.push(format!("TLS: pinned to {p}")),
        TlsTrust::CaFile(f) => s1.notes.push(format!("TLS: certificates signed by {f}")),
        TlsTrust::SystemRoots => {}
    }
    site
}

/// Step 2: the secret the controller names, resolved from this orchestrator's stores
/// (whether the type needs one is the catalog's word). The step stays Ok when there is
/// nothing to resolve.
fn resolve_secret(reg: &Registration<'_>, cc: &ControllerConfig, s2: &mut Step) -> Option<Secret> {
    let ty = cc.controller_type();
    match &cc.secret {
        None if ty.secret() == SecretUse::Required => {
            fail(
                s2,
                format!("a {ty} controller needs a secret (secret: NAME)"),
            );
            None
        }
        None => {
            s2.status = StepStatus::Ok;
            s2.notes.push("the controller names no secret".into());
            None
        }
        Some(name) => match reg.secrets.resolve(name) {
            Ok(s) => {
                s2.status = StepStatus::Ok;
                s2.notes
                    .push(format!("secret {name} resolves on this orchestrator"));
                if ty.secret() == SecretUse::Unused {
                    s2.notes.push(format!("a {ty} controller does not use it"));
                }
                Some(s)
            }
            Err(e) => {
                fail(s2, e.to_string());
                None
            }
        },
    }
}

/// Runs the four steps.
pub async fn register(reg: Registration<'_>) -> Report {
    let mut steps = Vec::new();
    let (driver, site) = build(&reg, &mut steps);
    let cc = reg.config.controller(reg.controller.as_str());
    let mut report = Report {
        controller: reg.controller.clone(),
        controller_type: cc
            .map(|c| c.controller_type().to_string())
            .unwrap_or_default(),
        orchestrator: reg.orchestrator.clone(),
        site,
        steps,
        identity: None,
        grades: vec![],
        bindings: vec![],
        warnings: vec![],
    };
    // Step 1's only warning is TLS checking turned off.
    if let Some(cc) = cc
        && matches!(cc.tls, TlsTrust::Insecure)
    {
        report
            .warnings
            .push(crate::tls::insecure_warning(reg.controller.as_str()));
    }
    let (Some(driver), Some(cc)) = (driver, cc) else {
        for (n, name) in [(3, "connectivity"), (4, "capabilities")] {
            let mut s = step(n, name, StepStatus::Skipped);
            s.notes.push("an earlier step failed".into());
            report.steps.push(s);
        }
        return report;
    };
    let ctx = || CallContext::with_timeout(reg.orchestrator.clone(), reg.timeout);
    let probe = match driver.probe(&ctx()).await {
        Ok(p) => p,
        Err(e) => {
            let mut s3 = step(3, "connectivity", StepStatus::Ok);
            fail(&mut s3, e.to_string());
            report.steps.push(s3);
            let mut s4 = step(4, "capabilities", StepStatus::Skipped);
            s4.notes.push("the target could not be read".into());
            report.steps.push(s4);
            return report;
        }
    };
    let s3 = connectivity(&reg, cc, &probe, &mut report.warnings);
    report.steps.push(s3);
    report.identity = Some(probe.identity);

    // Step 4: the grades, then every binding of this controller checked by the driver.
    let mut s4 = step(4, "capabilities", StepStatus::Ok);
    for g in &probe.grades {
        if g.grade == Grade::Failed {
            warn(
                &mut s4,
                &mut report.warnings,
                format!(
                    "{} failed: no plan can bind it as configured ({})",
                    g.capability, g.reason
                ),
            );
        }
    }
    report.grades = probe.grades;
    for (path, site, b) in bindings_of(reg.config, reg.controller) {
        let target = Target {
            capability: b.capability.clone(),
            resource: b.resource.clone(),
            params: b.params.clone(),
            site,
        };
        let problems = match driver.check_binding(&ctx(), &target).await {
            Ok(p) => p,
            Err(e) => vec![format!("could not check: {e}")],
        };
        if !problems.is_empty() {
            s4.status = StepStatus::Failed;
        }
        report.bindings.push(BindingCheck {
            path,
            capability: b.capability.clone(),
            resource: b.resource.clone(),
            problems,
        });
    }
    report.steps.push(s4);
    report
}

/// Step 3 after a successful probe: what the target is, and the warnings an operator must see
/// before trusting it (the probe's own, another controller driving the same system or
/// endpoint, a certificate to pin).
fn connectivity(
    reg: &Registration<'_>,
    cc: &ControllerConfig,
    probe: &Probe,
    warnings: &mut Vec<String>,
) -> Step {
    let mut s3 = step(3, "connectivity", StepStatus::Ok);
    s3.notes.push(format!("identity {}", probe.identity.id));
    for (k, v) in &probe.identity.facts {
        s3.notes.push(format!("{k}: {v}"));
    }
    if let Some(fp) = &probe.identity.tls_fingerprint
        && !matches!(cc.tls, TlsTrust::Pin(_))
    {
        s3.notes.push(format!(
            "TLS certificate {fp}: compare it with the device's, then pin it with tls: {{pin: \"{fp}\"}}"
        ));
    }
    for w in &probe.warnings {
        warn(&mut s3, warnings, w.clone());
    }
    for (other, id) in reg.known {
        if other != reg.controller && *id == probe.identity.id {
            warn(
                &mut s3,
                warnings,
                format!(
                    "controller {other} has the same identity {id}: both drive the same system"
                ),
            );
        }
    }
    let mine = endpoint_of(&cc.kind);
    for (other, occ) in &reg.config.config().controllers {
        if other != reg.controller && mine.is_some() && endpoint_of(&occ.kind) == mine {
            warn(
                &mut s3,
                warnings,
                format!(
                    "controller {other} points at the same endpoint {}",
                    mine.as_deref().unwrap_or("")
                ),
            );
        }
    }
    s3
}

/// Every binding in the plans that names `controller`, with its configuration path and the
/// site it acts for (a service binding acts for the plan's owner), in configuration order.
fn bindings_of<'c>(
    config: &'c ValidatedConfig,
    controller: &ControllerId,
) -> Vec<(String, SiteId, &'c Binding)> {
    let mut bindings = Vec::new();
    for (plan_id, plan) in &config.config().plans {
        for (site, list) in &plan.instances {
            for (i, b) in list.iter().enumerate() {
                bindings.push((
                    format!("plans.{plan_id}.instances.{site}[{i}]"),
                    site.clone(),
                    b,
                ));
            }
        }
        for (i, b) in plan.service.iter().enumerate() {
            bindings.push((
                format!("plans.{plan_id}.service[{i}]"),
                plan.owner.clone(),
                b,
            ));
        }
    }
    bindings.retain(|(_, _, b)| b.controller == *controller);
    bindings
}

/// Lists what the controller's capabilities can act on, from this orchestrator (steps 1 and
/// 2 first: discovery too runs only from a site allowed to reach the controller).
pub async fn discover(reg: Registration<'_>) -> Result<Vec<Discovered>, String> {
    let mut steps = Vec::new();
    let (driver, _) = build(&reg, &mut steps);
    let Some(driver) = driver else {
        return Err(steps
            .iter()
            .filter(|s| s.status == StepStatus::Failed)
            .flat_map(|s| s.notes.iter().cloned())
            .collect::<Vec<_>>()
            .join("; "));
    };
    let ctx = CallContext::with_timeout(reg.orchestrator.clone(), reg.timeout);
    driver.discover(&ctx).await.map_err(|e| e.to_string())
}
