//! The generic fence-agent driver: any installed Pacemaker fence agent (`fence_*`).
//!
//! An agent is run once per action, with no arguments and its options as `key=value` lines on
//! stdin (Pacemaker's convention, from `fencing.py`): the controller's `options`, then
//! `action=`, `plug=` (when the agent's metadata has a plug parameter) and `password=` from the
//! resolved secret. Nothing goes on the command line, where `ps` would show it, and the agent
//! runs with an emptied environment so it cannot see other secrets.
//!
//! - `metadata` is read at registration (and once per driver) to learn its actions and
//!   parameters;
//! - `off` fences, then `status` reads it back: exit 2 means off (FENCED), 0 means on, 1 or
//!   anything else is an error (UNKNOWN). A failed `off` is still followed by `status`: an
//!   agent that fails because the plug was already off has still left it off;
//! - `on` unfences, and `status` reads it back;
//! - `list` (when the agent has it) lists plugs for discovery; `monitor` checks that the
//!   device answers.
//!
//! qfence enforces the call's deadline itself: the agent runs in its own process group, and
//! the whole group (the agent and anything it started, such as `ipmitool`) is killed when the
//! deadline passes, the call is cancelled, or the call's future is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, FenceLevel, Grade};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target,
};
use crate::error::Error;
use crate::secrets::Secret;

mod driver;
mod metadata;
mod process;
pub use metadata::*;
#[cfg(test)]
use process::*;

const POWER_OFF: &str = "power.off";
/// The most qfence reads of an agent's stdout or stderr.
const MAX_OUTPUT: u64 = 256 * 1024;
/// Where agents live when `PATH` does not say (Debian installs them in /usr/sbin).
const AGENT_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/usr/local/sbin"];
/// Options that are the driver's to set, never the configuration's.
const RESERVED: &[&str] = &["action", "o", "plug", "port", "n", "nodename"];

/// A fence agent.
#[derive(Debug)]
pub struct FenceAgentDriver {
    id: ControllerId,
    agent: String,
    options: BTreeMap<String, String>,
    level: FenceLevel,
    secret: Option<Secret>,
    metadata: OnceCell<Metadata>,
    poll_interval: Duration,
    /// Where to look for the agent; `None`: `PATH`, then [`AGENT_DIRS`].
    search_path: Option<Vec<PathBuf>>,
}

impl FenceAgentDriver {
    /// Builds the driver: checks the agent's name and options, without running it.
    pub fn new(
        id: ControllerId,
        agent: &str,
        options: &BTreeMap<String, String>,
        level: FenceLevel,
        secret: Option<Secret>,
    ) -> Result<Self, Error> {
        let build = |reason: String| Error::Build {
            controller: id.to_string(),
            reason,
        };
        let name_ok = agent.starts_with("fence_")
            && agent.len() > 6
            && agent
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(build(format!(
                "agent {agent:?} is not a fence agent name (fence_ followed by letters, digits, _ or -)"
            )));
        }
        for (k, v) in options {
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(build(format!(
                    "option {k:?}: option names are letters, digits and _"
                )));
            }
            if RESERVED.contains(&k.as_str()) {
                return Err(build(format!(
                    "option {k:?} is set by qfence from the binding; remove it"
                )));
            }
            if k.contains("passw") || k == "p" {
                return Err(build(format!(
                    "option {k:?} would put a credential in the configuration; use secret: instead"
                )));
            }
            if v.contains(['\n', '\r', '\0']) {
                return Err(build(format!(
                    "option {k:?}: a value may not contain a line break"
                )));
            }
        }
        Ok(Self {
            id,
            agent: agent.to_owned(),
            options: options.clone(),
            level,
            secret,
            metadata: OnceCell::new(),
            poll_interval: Duration::from_millis(500),
            search_path: None,
        })
    }

    /// Looks for the agent only in these directories (tests, and sites that install agents
    /// elsewhere).
    #[must_use]
    pub fn with_search_path(mut self, dirs: Vec<PathBuf>) -> Self {
        self.search_path = Some(dirs);
        self
    }

    /// The fence level the controller's configuration gives its fences.
    pub fn level(&self) -> FenceLevel {
        self.level
    }

    /// The plug to pass for a resource: only when the agent takes one.
    async fn plug<'a>(
        &self,
        ctx: &CallContext,
        resource: &'a str,
    ) -> Result<Option<&'a str>, DriverError> {
        let md = self.metadata(ctx).await?;
        Ok((md.parameters.contains("plug") || md.parameters.contains("port")).then_some(resource))
    }

    fn check_capability(&self, call: &str, target: &Target) -> Result<(), DriverError> {
        if target.capability == POWER_OFF {
            Ok(())
        } else {
            Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!(
                    "fence-agent has no capability {:?} (it has power.off)",
                    target.capability
                ),
                false,
            ))
        }
    }

    /// Runs `status`: Ok(true) for off (exit 2), Ok(false) for on (exit 0), else an error.
    async fn status(
        &self,
        ctx: &CallContext,
        call: &str,
        resource: &str,
    ) -> Result<(bool, String), DriverError> {
        let plug = self.plug(ctx, resource).await?;
        let run = self.run(ctx, call, "status", plug).await?;
        match run.code {
            Some(2) => Ok((
                true,
                format!("{} status: exit 2 ({})", self.agent, run.said()),
            )),
            Some(0) => Ok((
                false,
                format!("{} status: exit 0 ({})", self.agent, run.said()),
            )),
            _ => Err(self.err(
                ErrorKind::Unreachable,
                call,
                format!(
                    "{} status failed ({}): {}",
                    self.agent,
                    run.code_str(),
                    run.said()
                ),
                false,
            )),
        }
    }

    /// Runs `action` (off or on), then reads `status` until it shows `want_off`, within the
    /// deadline. The agent's own answer is never the proof; the status read is.
    async fn act(
        &self,
        ctx: &CallContext,
        call: &str,
        target: &Target,
        action: &str,
        want_off: bool,
    ) -> Result<Reading, DriverError> {
        self.check_capability(call, target)?;
        let md = self.metadata(ctx).await?;
        if !md.actions.contains(action) {
            return Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!("{} has no {action} action", self.agent),
                false,
            ));
        }
        let plug = self.plug(ctx, &target.resource).await?;
        let run = self.run(ctx, call, action, plug).await?;
        let acted = run.code == Some(0);
        let mut last;
        loop {
            match self.status(ctx, call, &target.resource).await {
                Ok((off, detail)) if off == want_off => {
                    let detail = if acted {
                        format!("{detail}, after {action}: {}", run.said())
                    } else {
                        format!(
                            "{detail}, although {action} failed ({}): {}",
                            run.code_str(),
                            run.said()
                        )
                    };
                    return Ok(ctx.reading(want_off, detail));
                }
                Ok((_, detail)) if !acted => {
                    return Err(self.err(
                        ErrorKind::Rejected,
                        call,
                        format!(
                            "{} {action} failed ({}): {}; then {detail}",
                            self.agent,
                            run.code_str(),
                            run.said()
                        ),
                        false,
                    ));
                }
                Ok((_, detail)) => last = detail,
                Err(e) if !acted => {
                    return Err(self.err(
                        e.kind,
                        call,
                        format!(
                            "{} {action} failed ({}): {}; then {}",
                            self.agent,
                            run.code_str(),
                            run.said(),
                            e.message
                        ),
                        true,
                    ));
                }
                Err(e) => last = e.message,
            }
            let left = ctx.deadline.saturating_duration_since(Instant::now());
            if left <= self.poll_interval {
                return Err(self.err(ErrorKind::Timeout, call, format!(
                    "{} {action} succeeded but status did not confirm it before the deadline; last: {last}",
                    self.agent), true));
            }
            tokio::time::sleep(self.poll_interval).await;
        }
    }

    fn identity_id(&self) -> String {
        const KEYS: &[&str] = &[
            "ip",
            "ipaddr",
            "ipport",
            "systems_uri",
            "status_file",
            "pve_node",
            "ssh",
            "plug",
        ];
        let picked: Vec<String> = self
            .options
            .iter()
            .filter(|(k, _)| KEYS.contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let opts = if picked.is_empty() {
            self.options
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        } else {
            picked
        };
        format!("fence-agent:{}:{}", self.agent, opts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_yields_name_actions_and_parameters() {
        let xml = r#"<?xml version="1.0" ?>
<resource-agent name="fence_dummy" shortdesc="Dummy fence agent" >
<parameters>
	<parameter name="action" unique="0" required="1">
	<parameter name="status_file" unique="0" required="0">
</parameters>
<actions>
	<action name="on" automatic="0"/>
	<action name="off" />
	<action name="status" />
</actions></resource-agent>"#;
        let md = Metadata::parse(xml).unwrap();
        assert_eq!(md.name, "fence_dummy");
        assert_eq!(md.shortdesc, "Dummy fence agent");
        assert_eq!(
            md.actions.iter().map(String::as_str).collect::<Vec<_>>(),
            ["off", "on", "status"]
        );
        assert!(md.parameters.contains("status_file"));
        assert!(Metadata::parse("not xml").is_none());
    }

    fn opts(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn credentials_and_reserved_options_are_refused_in_configuration() {
        let id = ControllerId::new("fa").unwrap();
        for bad in [
            ("password", "x"),
            ("passwd", "x"),
            ("action", "off"),
            ("plug", "1"),
            ("ip", "a\nb"),
        ] {
            let e = FenceAgentDriver::new(
                id.clone(),
                "fence_dummy",
                &opts(&[bad]),
                FenceLevel::Compute,
                None,
            );
            assert!(e.is_err(), "{bad:?} accepted");
        }
        assert!(
            FenceAgentDriver::new(id.clone(), "rm", &opts(&[]), FenceLevel::Compute, None).is_err()
        );
        assert!(
            FenceAgentDriver::new(
                id.clone(),
                "fence_../x",
                &opts(&[]),
                FenceLevel::Compute,
                None
            )
            .is_err()
        );
        assert!(
            FenceAgentDriver::new(
                id,
                "fence_ipmilan",
                &opts(&[("ip", "10.0.0.1")]),
                FenceLevel::Compute,
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn the_agents_last_meaningful_line_is_what_it_said() {
        let r = Run {
            code: Some(1),
            stdout: String::new(),
            stderr: "x ERROR: Failed: Unable to obtain correct plug status\nx ERROR: Please use '-h' for usage\n".into(),
        };
        assert_eq!(
            r.said(),
            "x ERROR: Failed: Unable to obtain correct plug status"
        );
    }
}
