//! The online commands: `qfence status`, `plan`, `controller` and `events` against a running
//! orchestrator's HTTP API.
//!
//! The model: every online command is one or a few calls through [`http::Api`], which knows
//! where the API is (`--api`/`QFENCE_API`), how to trust its certificate (`--ca-file`,
//! `--pin`, else the system roots) and the bearer token (`--token`/`QFENCE_TOKEN`, never
//! printed). What went wrong is one [`Failure`], which decides the exit code: 0 done, 1 failed
//! or refused (the API's stable code and message on stderr), 2 used the wrong way, 3 the API
//! could not be reached. Output is a table for people or JSON for scripts.
//!
//! The same group can hold offline forms that read a configuration file (`plan show FILE
//! PLAN`, `controller test CONFIG NAME`): an offline form always names its file first, so it
//! has one positional argument more than the online form (see docs/cli.md).

pub mod controller;
pub mod events;
pub mod http;
pub mod instance_ha;
pub mod plan;
pub mod progress;
pub mod status;
pub mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use qfence_runtime::dto::ErrorBody;

use super::{EXIT_USAGE, Format};

/// Exit code: done.
pub const EXIT_OK: u8 = 0;
/// Exit code: the API refused, or the operation failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: the API could not be reached (connection, TLS, timeout).
pub const EXIT_UNREACHABLE: u8 = 3;

/// A bearer token. Its `Debug` hides it, so it cannot end up in a log or a panic message.
#[derive(Clone)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

impl std::str::FromStr for Token {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Token(s.to_owned()))
    }
}

/// Where the API is and how to talk to it: what every online command takes.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The API's base URL, e.g. https://dc1-a.example.net:7443.
    #[arg(long = "api", env = "QFENCE_API", value_name = "URL")]
    pub api: Option<String>,
    /// The bearer token (better from the environment: a command line is visible to others).
    /// Never printed.
    #[arg(
        long,
        env = "QFENCE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<Token>,
    /// Trust the API's certificate when this CA (PEM) signed it.
    #[arg(long = "ca-file", env = "QFENCE_API_CA", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Trust exactly the certificate with this SHA-256 fingerprint (`sha256:HEX`), as the
    /// daemon prints it for its self-signed certificate.
    #[arg(
        long,
        env = "QFENCE_API_PIN",
        value_name = "SHA256",
        conflicts_with = "ca_file"
    )]
    pub pin: Option<String>,
    /// The deadline of each call to the API.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub request_timeout_seconds: f64,
}

/// Why an online command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The API answered with an error.
    /// Boxed: results carrying a failure stay small.
    Api { status: u16, body: Box<ErrorBody> },
    /// The API could not be reached, or its certificate was not trusted.
    Unreachable(String),
    /// The command was used the wrong way.
    Usage(String),
    /// The operation was accepted but did not finish well, or a check failed.
    Failed(String),
}

impl Failure {
    /// While following an operation or watching: a failure that may pass (the API cannot be
    /// reached, or answers 503 while leadership moves), to say once and ask again.
    pub fn transient(&self) -> Option<String> {
        match self {
            Failure::Unreachable(why) => Some(format!("cannot reach the API: {why}")),
            Failure::Api { status: 503, body } => Some(format!(
                "the API is unavailable: {} ({})",
                body.message, body.code
            )),
            _ => None,
        }
    }

    fn code(&self) -> u8 {
        match self {
            Failure::Api { .. } | Failure::Failed(_) => EXIT_FAILED,
            Failure::Unreachable(_) => EXIT_UNREACHABLE,
            Failure::Usage(_) => EXIT_USAGE,
        }
    }

    /// Prints the failure: a clear sentence on stderr; with `--format json`, an API error's
    /// body on stdout as well, for scripts.
    fn report(&self, format: Format) {
        match self {
            Failure::Api { status, body } => {
                if format == Format::Json {
                    println!(
                        "{}",
                        serde_json::json!({"error": body, "http_status": status})
                    );
                }
                eprintln!("error: {} ({}, HTTP {status})", body.message, body.code);
                if let Some(g) = body.current_generation {
                    eprintln!(
                        "  the plan is now at generation {g}: look at it again (qfence status) and \
                         repeat with --generation {g} if it still makes sense"
                    );
                }
                for i in body.issues.iter().flatten() {
                    eprintln!("  {}: {}: {}", i.severity, i.path, i.message);
                }
                if let Some(l) = &body.leader {
                    let who = l.leader.as_deref().unwrap_or("unknown");
                    let at = l.address.as_deref().unwrap_or("an unknown address");
                    eprintln!("  the leader is {who} at {at} (term {})", l.term);
                }
                if body.code == "unauthorized" {
                    eprintln!("  check --token or QFENCE_TOKEN");
                }
            }
            Failure::Unreachable(why) => {
                eprintln!("error: cannot reach the API: {why}");
                if why.contains("certificate not trusted") {
                    eprintln!(
                        "  the daemon serves a self-signed certificate: check the fingerprint it \
                         logs at start, then pass it with --pin (or QFENCE_API_PIN), or its CA \
                         with --ca-file"
                    );
                }
            }
            Failure::Usage(why) => eprintln!("error: {why}"),
            Failure::Failed(why) => eprintln!("error: {why}"),
        }
    }
}

/// What an online command returns.
pub type Outcome = Result<(), Failure>;

/// Runs an online command on a runtime made for it and turns its outcome into the exit code.
pub fn run<F>(format: Format, command: &str, fut: F) -> ExitCode
where
    F: std::future::Future<Output = Outcome>,
{
    if let Some(code) = super::only(format, &[Format::Human, Format::Json], command) {
        return code;
    }
    // reqwest is built without a default rustls provider: this process uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(f) => {
            f.report(format);
            ExitCode::from(f.code())
        }
    }
}

/// A duration from a number of seconds given on the command line.
pub fn seconds(s: f64, what: &str) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure::Usage(format!("{what} must be a positive number of seconds")))
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("API values serialise")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> Failure {
        Failure::Api {
            status,
            body: Box::new(ErrorBody {
                code: code.into(),
                message: "m".into(),
                current_generation: None,
                issues: None,
                leader: None,
            }),
        }
    }

    #[test]
    fn only_an_outage_or_a_503_is_waited_out() {
        assert!(Failure::Unreachable("refused".into()).transient().is_some());
        assert!(api(503, "not_leader").transient().is_some());
        assert!(api(409, "stale_generation").transient().is_none());
        assert!(api(401, "unauthorized").transient().is_none());
        assert!(Failure::Failed("x".into()).transient().is_none());
    }

    #[test]
    fn exit_codes_follow_the_kind_of_failure() {
        assert_eq!(api(409, "refused").code(), EXIT_FAILED);
        assert_eq!(Failure::Failed("x".into()).code(), EXIT_FAILED);
        assert_eq!(Failure::Unreachable("x".into()).code(), EXIT_UNREACHABLE);
        assert_eq!(Failure::Usage("x".into()).code(), EXIT_USAGE);
    }

    #[test]
    fn the_token_is_hidden_from_debug_output() {
        let t: Token = "s3cret".parse().unwrap();
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
