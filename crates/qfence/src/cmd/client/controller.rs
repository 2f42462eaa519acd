//! `qfence controller ...`: online against the API, and the offline forms that run from this
//! orchestrator with a configuration file.
//!
//! The rule: `controller test CONFIG NAME` (two names) runs the registration steps from this
//! machine, offline; `controller test NAME` (one name) asks the API to test it. `discover` is
//! offline only; `list` and `register` are online.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use qfence_runtime::dto::{ControllerTest, ControllerView, GradeDto, RegisterController};

use super::http::{Api, seg};
use super::{ApiArgs, Failure, Outcome, print_json, table};
use crate::cmd::Format;
use crate::cmd::controller::{ControllerArgs, ControllerCmd as Offline};

#[derive(Debug, Subcommand)]
pub enum ControllerCmd {
    /// Every controller: type, site, reach, secret name, the grades of its last test. Online.
    List {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Test a controller. `controller test NAME` asks the API (a probe without side effects,
    /// graded); `controller test CONFIG NAME` runs the four registration steps from this
    /// orchestrator, offline. Exit 1 when unreachable or a grade failed.
    #[command(
        after_help = "Offline form: CONFIG NAME (a configuration file, then the controller), run \
                      from this machine. Online form: NAME alone, against --api."
    )]
    Test {
        /// NAME (online), or CONFIG NAME (offline).
        #[arg(num_args = 1..=2, required = true, value_names = ["CONFIG_OR_NAME", "NAME"])]
        names: Vec<String>,
        #[command(flatten)]
        offline: OfflineArgs,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// List the resources the controller's capabilities can act on, from this orchestrator.
    /// Offline: CONFIG NAME.
    Discover(ControllerArgs),
    /// Run one capability by hand, from this orchestrator, offline: CONFIG NAME CAPABILITY
    /// RESOURCE, with the runtime's driver, deadline, read-back and verdict (a fence by hand,
    /// as `stonith_admin --fence`). Exit 0 done (a check: on), 2 a check read off, 1 failed
    /// or unknown.
    Call(crate::cmd::controller_call::CallArgs),
    /// Register a new controller with the API: its document as the configuration file writes
    /// it under `controllers.NAME` (YAML or JSON), credential by reference only.
    Register {
        name: String,
        /// The file holding the controller's document.
        #[arg(long, value_name = "FILE")]
        spec: PathBuf,
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// The offline test's own options.
#[derive(Debug, clap::Args)]
pub struct OfflineArgs {
    /// Offline: the orchestrator this runs as (its site decides what it may reach).
    #[arg(long, env = "QFENCE_ORCHESTRATOR")]
    pub orchestrator: Option<String>,
    /// Offline: a directory of secret files.
    #[arg(long, env = "QFENCE_SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// Offline: the deadline of each call to the controller.
    #[arg(long, default_value_t = 30.0)]
    pub timeout_seconds: f64,
    /// Offline: print JSON instead of text (online commands use --format json).
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: ControllerCmd, format: Format) -> ExitCode {
    match cmd {
        ControllerCmd::Discover(mut a) => {
            a.json |= format == Format::Json;
            crate::cmd::controller::run(Offline::Discover(a))
        }
        ControllerCmd::Test {
            mut names,
            offline,
            api,
        } => {
            if names.len() == 2 {
                let name = names.pop().expect("two names");
                let config = PathBuf::from(names.pop().expect("two names"));
                return crate::cmd::controller::run(Offline::Test(ControllerArgs {
                    config,
                    name,
                    orchestrator: offline.orchestrator,
                    secrets_dir: offline.secrets_dir,
                    timeout_seconds: offline.timeout_seconds,
                    json: offline.json || format == Format::Json,
                }));
            }
            let name = names.pop().expect("one name");
            super::run(format, "controller test", test(api, name, format))
        }
        ControllerCmd::Call(a) => crate::cmd::controller_call::run(a, format == Format::Json),
        ControllerCmd::List { api } => super::run(format, "controller list", list(api, format)),
        ControllerCmd::Register { name, spec, api } => super::run(
            format,
            "controller register",
            register(api, name, spec, format),
        ),
    }
}

fn grade(g: GradeDto) -> &'static str {
    match g {
        GradeDto::Proven => "proven",
        GradeDto::Inferred => "inferred",
        GradeDto::Unverifiable => "unverifiable",
        GradeDto::Failed => "FAILED",
    }
}

fn print_controllers(cs: &[ControllerView]) {
    if cs.is_empty() {
        println!("no controllers");
        return;
    }
    let mut t = table::new(&[
        "CONTROLLER",
        "TYPE",
        "SITE",
        "REACH",
        "SECRET",
        "GRADES",
        "TESTED",
    ]);
    for c in cs {
        let grades = if c.grades.is_empty() {
            "untested".to_owned()
        } else {
            c.grades
                .iter()
                .map(|g| format!("{} {}", g.capability, grade(g.grade)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        t.add_row(vec![
            c.name.clone(),
            c.controller_type.clone(),
            c.site.clone(),
            c.reach.join(","),
            c.secret.clone().unwrap_or_else(|| "-".into()),
            grades,
            table::maybe(c.tested_at_ms),
        ]);
    }
    table::print(&t);
}

async fn list(api: ApiArgs, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let cs: Vec<ControllerView> = api.get("/api/v1/controllers").await?;
    if format == Format::Json {
        print_json(&cs);
    } else {
        print_controllers(&cs);
    }
    Ok(())
}

async fn test(api: ApiArgs, name: String, format: Format) -> Outcome {
    let api = Api::new(&api)?;
    let r: ControllerTest = api
        .post(
            &format!("/api/v1/controllers/{}/test", seg(&name)),
            &serde_json::json!({}),
        )
        .await?;
    if format == Format::Json {
        print_json(&r);
    } else {
        println!(
            "{}: {}{}",
            r.controller,
            if r.reachable {
                "reachable"
            } else {
                "NOT reachable"
            },
            r.identity
                .as_deref()
                .map(|i| format!(", {i}"))
                .unwrap_or_default()
        );
        println!("{}", r.message);
        if !r.grades.is_empty() {
            let mut t = table::new(&["CAPABILITY", "GRADE", "DETAIL"]);
            for g in &r.grades {
                t.add_row(vec![
                    g.capability.clone(),
                    grade(g.grade).to_owned(),
                    g.detail.clone(),
                ]);
            }
            table::print(&t);
        }
    }
    let failed: Vec<&str> = r
        .grades
        .iter()
        .filter(|g| g.grade == GradeDto::Failed)
        .map(|g| g.capability.as_str())
        .collect();
    if !r.reachable {
        return Err(Failure::Failed(format!(
            "{} is not reachable",
            r.controller
        )));
    }
    if !failed.is_empty() {
        return Err(Failure::Failed(format!(
            "{}: failed: {}",
            r.controller,
            failed.join(", ")
        )));
    }
    Ok(())
}

async fn register(api: ApiArgs, name: String, spec: PathBuf, format: Format) -> Outcome {
    let text = std::fs::read_to_string(&spec)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", spec.display())))?;
    // YAML is a superset of JSON: one parser reads either.
    let spec_value: serde_json::Value = serde_saphyr::from_str(&text)
        .map_err(|e| Failure::Usage(format!("{} is not YAML or JSON: {e}", spec.display())))?;
    let api = Api::new(&api)?;
    let c: ControllerView = api
        .post(
            "/api/v1/controllers",
            &RegisterController {
                name,
                spec: spec_value,
            },
        )
        .await?;
    if format == Format::Json {
        print_json(&c);
    } else {
        println!(
            "registered {}; test it with `qfence controller test {}`",
            c.name, c.name
        );
        print_controllers(std::slice::from_ref(&c));
    }
    Ok(())
}
