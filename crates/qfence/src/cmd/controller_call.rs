//! `qfence controller call CONFIG NAME CAPABILITY RESOURCE [--verb perform|check|undo]`: a
//! fence by hand, what `stonith_admin --fence` or a fence agent run by hand is to Pacemaker.
//!
//! It runs from *this* orchestrator, offline, exactly as the runtime would: the controller's
//! driver built from this machine's secret stores (as `qfence serve` builds it), the call in
//! its lane with the fence's pre-fence binding check, the controller's deadline, an undo read
//! back by an independent check, and the answer classified by the executor's own
//! [`run_call`]. The exit status follows fence agents: 0 done (a check: the target is on),
//! 2 a check read the target off, 1 failed or unknown, or the call could not be made.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use qfence_call::{Call, PreFence, Target, Verb};
use qfence_controllers::SecretStore;
use qfence_core::{Millis, Observation, Observed, Outcome, Rules};
use qfence_model::config::ValidatedConfig;
use qfence_model::{CapabilitySpec, ControllerId, OrchestratorId, Role, SiteId};
use qfence_runtime::executor::{Finished, answer_within, run_call};
use qfence_runtime::{ConfigCell, LocalDrivers};
use tokio_util::sync::CancellationToken;

/// Exit status: done, or a check read the target on (fence agents' convention).
pub const EXIT_DONE: u8 = 0;
/// Exit status: failed, unknown, or the call could not be made.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: a check read the target off (fence agents' `status` of a powered-off node).
pub const EXIT_OFF: u8 = 2;

/// Which driver method the call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CallVerb {
    /// Make the capability's condition hold (fence: power the host off) and read it back.
    Perform,
    /// Read whether the condition holds; changes nothing.
    Check,
    /// Undo it (unfence: power the host on) and read it back with an independent check.
    Undo,
}

/// `qfence controller call ...`
#[derive(Debug, Args)]
pub struct CallArgs {
    /// The configuration file.
    pub config: PathBuf,
    /// The controller's name.
    pub name: String,
    /// The capability (`power.off`).
    pub capability: String,
    /// The resource it acts on (a system, a VM, a plug...), as a binding would name it.
    pub resource: String,
    /// What to do.
    #[arg(long, value_enum, default_value_t = CallVerb::Perform)]
    pub verb: CallVerb,
    /// A capability parameter, `NAME=VALUE` (repeatable), as a binding's `params`.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The site the action is for (a binding's site); default: the controller's site.
    #[arg(long)]
    pub site: Option<String>,
    /// The orchestrator this runs as (its site decides what it may reach).
    #[arg(long, env = "QFENCE_ORCHESTRATOR")]
    pub orchestrator: Option<String>,
    /// A directory of secret files (one per secret, mode 0600), after systemd credentials
    /// and QFENCE_SECRET_* variables.
    #[arg(long, env = "QFENCE_SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// The call's deadline; default: the controller's `timeout_seconds`, as the runtime uses.
    #[arg(long)]
    pub timeout_seconds: Option<f64>,
}

/// What the call did and read, as `--format json` prints it.
#[derive(Debug, serde::Serialize)]
struct CallReport {
    controller: String,
    orchestrator: String,
    capability: String,
    resource: String,
    verb: Verb,
    /// What the executor's classification made of the answer.
    #[serde(flatten)]
    finished: Finished,
    /// For a check of a fence capability: the verdict the decision core gives this reading.
    verdict: Option<qfence_model::Verdict>,
    /// The target's power state in fence agents' words ("on", "off"), for a check whose
    /// capability says it.
    status: Option<&'static str>,
    took_ms: u64,
    exit: u8,
}

/// Runs the call; returns the process exit code.
pub fn run(args: CallArgs, json: bool) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match rt.block_on(call(args)) {
        Ok(report) => {
            if json {
                let text = serde_json::to_string_pretty(&report).expect("a report serialises");
                println!("{text}");
            } else {
                print_human(&report);
            }
            ExitCode::from(report.exit)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

fn print_human(r: &CallReport) {
    let f = &r.finished;
    let verb = format!("{:?}", r.verb).to_lowercase();
    let outcome = match f.outcome {
        Outcome::Done => "done",
        Outcome::Failed => "FAILED",
        Outcome::Unknown => "UNKNOWN",
    };
    println!(
        "{verb} {} {} via {} (from {}): {outcome} in {} ms",
        r.capability, r.resource, r.controller, r.orchestrator, r.took_ms
    );
    let read = match f.observed {
        Observed::Holds => "holds",
        Observed::NotHeld => "does not hold",
        Observed::Unknown => "UNKNOWN",
    };
    println!("  read: {} {read}: {}", r.capability, f.detail);
    if let Some(s) = r.status {
        println!("  status: {s}");
    }
    if let Some(v) = r.verdict {
        println!("  verdict: {v}");
    }
}

/// Makes the call and says what it came to; `Err` when it could not be made.
async fn call(args: CallArgs) -> anyhow::Result<CallReport> {
    let config = super::controller::load(&args.config)?;
    let me = super::controller::pick_orchestrator(&config, args.orchestrator.as_deref())?;
    let controller = ControllerId::new(args.name.clone())
        .with_context(|| format!("{:?} is not a controller name", args.name))?;
    let (call, spec, fence) = resolve(&config, &me, &controller, &args)?;
    let text = std::fs::read_to_string(&args.config).unwrap_or_default();
    let cell = ConfigCell::new(config, text);
    // The same stores `qfence serve` reads: systemd credentials, QFENCE_SECRET_*, the
    // directory. A driver that cannot be built makes the call UNKNOWN, as in the runtime.
    let secrets = SecretStore::from_process(args.secrets_dir.clone());
    let drivers = LocalDrivers::build(me.clone(), &cell, &secrets);
    if let Some((_, why)) = drivers
        .unavailable()
        .into_iter()
        .find(|(id, _)| *id == controller)
    {
        bail!("controller {controller} has no driver here: {why}");
    }
    let cancel = CancellationToken::new();
    let outer = answer_within(&call);
    let started = tokio::time::Instant::now();
    let (drivers, id, cancel) = (&drivers, &controller, &cancel);
    let finished = run_call(&call, false, move |c: Call| async move {
        tokio::time::timeout(outer, drivers.run(id, &c, cancel.clone()))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {outer:?}")))
    })
    .await;
    let took = started.elapsed();
    drivers.close().await;
    let (verdict, status, exit) = judge(&call, spec, fence, &finished);
    Ok(CallReport {
        controller: controller.to_string(),
        orchestrator: me.to_string(),
        capability: call.target.capability.clone(),
        resource: call.target.resource.clone(),
        verb: call.verb,
        finished,
        verdict,
        status,
        took_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        exit,
    })
}

/// The call, as the executor's resolve would make it for a binding of this capability.
fn resolve(
    config: &ValidatedConfig,
    me: &OrchestratorId,
    controller: &ControllerId,
    args: &CallArgs,
) -> anyhow::Result<(Call, &'static CapabilitySpec, bool)> {
    let c = config.config();
    let Some(cc) = c.controllers.get(controller) else {
        let names: Vec<&str> = c.controllers.keys().map(|k| k.as_str()).collect();
        bail!(
            "there is no controller {controller:?} (there are: {})",
            names.join(", ")
        );
    };
    let ty = cc.controller_type();
    let Some(spec) = ty.capability(&args.capability) else {
        let names: Vec<&str> = ty.capabilities().iter().map(|s| s.name).collect();
        bail!(
            "{:?} is not a capability of controller {controller} ({ty}): {}",
            args.capability,
            names.join(", ")
        );
    };
    let site = c.orchestrators.get(me).map(|o| &o.site);
    if !site.is_some_and(|s| cc.callable_from(s)) {
        let allowed: Vec<&str> = cc.allowed_sites().map(|s| s.as_str()).collect();
        bail!(
            "orchestrator {me} is at site {}, which may not call controller {controller} (allowed: {})",
            site.map_or("-", |s| s.as_str()),
            allowed.join(", ")
        );
    }
    let params = parse_params(&args.params, spec)?;
    let target_site = match &args.site {
        Some(s) => SiteId::new(s.clone()).with_context(|| format!("{s:?} is not a site name"))?,
        None => cc.site.clone(),
    };
    let timeout = match args.timeout_seconds {
        None => cc.timeout,
        Some(t) if t.is_finite() && t > 0.0 => Duration::from_secs_f64(t),
        Some(_) => bail!("--timeout-seconds must be a positive number of seconds"),
    };
    let verb = match args.verb {
        CallVerb::Perform => Verb::Perform,
        CallVerb::Check => Verb::Check,
        CallVerb::Undo => Verb::Undo,
    };
    let target = Target {
        capability: spec.name.to_owned(),
        resource: args.resource.clone(),
        params,
        site: target_site,
    };
    let mut call = Call::new(verb, target, timeout);
    let fence = spec.allows(Role::Fence);
    if fence && verb == Verb::Perform {
        // No registered identity offline: the pre-fence checks are the binding's own.
        call.pre_fence = Some(PreFence { identity: None });
    }
    Ok((call, spec, fence))
}

/// `--param NAME=VALUE`s, each a parameter the capability declares.
fn parse_params(raw: &[String], spec: &CapabilitySpec) -> anyhow::Result<BTreeMap<String, String>> {
    let mut params = BTreeMap::new();
    for p in raw {
        let Some((k, v)) = p.split_once('=') else {
            bail!("--param {p:?}: expected NAME=VALUE");
        };
        if spec.params.get(k).is_none() {
            bail!(
                "--param {k:?}: {} takes no such parameter (it takes: {})",
                spec.name,
                spec.params.names()
            );
        }
        params.insert(k.to_owned(), v.to_owned());
    }
    Ok(params)
}

/// The verdict (a fence capability's check), the power status in fence agents' words, and
/// the exit status. A check of a fence capability reads the target off when its condition
/// holds (fenced); of any other, on when it holds. A perform or undo exits 0 only when done.
fn judge(
    call: &Call,
    spec: &CapabilitySpec,
    fence: bool,
    f: &Finished,
) -> (Option<qfence_model::Verdict>, Option<&'static str>, u8) {
    if call.verb != Verb::Check {
        let exit = if f.outcome == Outcome::Done {
            EXIT_DONE
        } else {
            EXIT_FAILED
        };
        return (None, None, exit);
    }
    let verdict = fence.then(|| {
        // The decision core's rule for one reading, taken now.
        let now = Millis(qfence_model::time::now_unix_ms());
        let obs = Observation {
            value: f.observed,
            at: now,
            detail: f.detail.clone(),
            definitive: f.definitive,
        };
        Rules::default().reading_verdict(Some(&obs), now, Duration::MAX, None)
    });
    let off = match f.observed {
        Observed::Unknown => return (verdict, None, EXIT_FAILED),
        Observed::Holds => fence,
        Observed::NotHeld => !fence,
    };
    let power = spec.name.starts_with("power.");
    let status = power.then_some(if off { "off" } else { "on" });
    (verdict, status, if off { EXIT_OFF } else { EXIT_DONE })
}
