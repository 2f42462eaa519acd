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
use std::time::{Duration, SystemTime};

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, FenceLevel, Grade};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target,
};
use crate::error::Error;
use crate::secrets::Secret;

const POWER_OFF: &str = "power.off";
/// The most qfence reads of an agent's stdout or stderr.
const MAX_OUTPUT: u64 = 256 * 1024;
/// Where agents live when `PATH` does not say (Debian installs them in /usr/sbin).
const AGENT_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/usr/local/sbin"];
/// Options that are the driver's to set, never the configuration's.
const RESERVED: &[&str] = &["action", "o", "plug", "port", "n", "nodename"];

/// What an agent says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    pub name: String,
    pub shortdesc: String,
    pub actions: BTreeSet<String>,
    pub parameters: BTreeSet<String>,
}

impl Metadata {
    /// Parses `<resource-agent>` XML. Only the few attributes qfence needs are read.
    pub fn parse(xml: &str) -> Option<Self> {
        let head_start = xml.find("<resource-agent")?;
        let head = &xml[head_start..head_start + xml[head_start..].find('>')?];
        let mut md = Metadata {
            name: attr(head, "name")?,
            shortdesc: attr(head, "shortdesc").unwrap_or_default(),
            ..Default::default()
        };
        for (tag, set) in [
            ("<action ", &mut md.actions),
            ("<parameter ", &mut md.parameters),
        ] {
            let mut rest = xml;
            while let Some(i) = rest.find(tag) {
                rest = &rest[i..];
                let end = rest.find('>').unwrap_or(rest.len());
                if let Some(n) = attr(&rest[..end], "name") {
                    set.insert(n);
                }
                rest = &rest[end..];
            }
        }
        Some(md)
    }
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let pat = format!(" {name}=\"");
    let i = tag.find(&pat)? + pat.len();
    let j = tag[i..].find('"')?;
    Some(tag[i..i + j].to_owned())
}

/// One finished agent run.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The agent's own words about what happened: its last meaningful line.
    fn said(&self) -> String {
        let pick = |s: &str| {
            s.lines()
                .map(str::trim)
                .rfind(|l| {
                    !l.is_empty()
                        && !l.contains("Please use '-h' for usage")
                        && !l.contains("DeprecationWarning")
                        && !l.starts_with("import ")
                        && !l.contains("Parse error: Ignoring unknown option")
                })
                .map(str::to_owned)
        };
        pick(&self.stderr)
            .or_else(|| pick(&self.stdout))
            .unwrap_or_else(|| "(no output)".into())
    }

    fn code_str(&self) -> String {
        self.code
            .map_or_else(|| "killed by a signal".into(), |c| format!("exit {c}"))
    }
}

/// Kills a process group when dropped, unless disarmed: the agent must not outlive its call,
/// whatever ends the call.
struct GroupKiller(Option<u32>);

impl GroupKiller {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take().and_then(|p| i32::try_from(p).ok()) {
            // Pid 0 would be our own group; `from_raw` refuses it (and negatives).
            if let Some(pgid) = rustix::process::Pid::from_raw(pgid) {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

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

    fn err(
        &self,
        kind: ErrorKind,
        call: &str,
        msg: impl Into<String>,
        unknown: bool,
    ) -> DriverError {
        DriverError::new(kind, &self.id, call, msg, unknown)
    }

    fn path(&self, call: &str) -> Result<PathBuf, DriverError> {
        let dirs: Vec<PathBuf> = match &self.search_path {
            Some(dirs) => dirs.clone(),
            None => std::env::var("PATH")
                .unwrap_or_default()
                .split(':')
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .chain(AGENT_DIRS.iter().map(PathBuf::from))
                .collect(),
        };
        for d in &dirs {
            let p = d.join(&self.agent);
            if p.is_file() {
                return Ok(p);
            }
        }
        Err(self.err(
            ErrorKind::Unsupported,
            call,
            format!(
                "fence agent {} is not installed on this orchestrator (looked in {})",
                self.agent,
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            false,
        ))
    }

    /// Replaces the secret wherever an agent echoed it.
    fn redact(&self, s: String) -> String {
        match &self.secret {
            Some(sec) if !sec.expose().is_empty() && s.contains(sec.expose()) => {
                s.replace(sec.expose(), "[redacted]")
            }
            _ => s,
        }
    }

    /// Runs the agent with one action, under the call's deadline and cancellation.
    async fn run(
        &self,
        ctx: &CallContext,
        call: &str,
        action: &str,
        plug: Option<&str>,
    ) -> Result<Run, DriverError> {
        let unknown = !matches!(action, "status" | "metadata" | "list" | "monitor");
        // Nothing is started for a call that is already over.
        if ctx.cancel.is_cancelled() {
            return Err(self.err(ErrorKind::Cancelled, call, "cancelled", false));
        }
        if Instant::now() >= ctx.deadline {
            return Err(self.err(
                ErrorKind::Timeout,
                call,
                "the deadline had passed before the agent was started",
                false,
            ));
        }
        let path = self.path(call)?;
        let mut stdin_text = zeroize::Zeroizing::new(String::new());
        for (k, v) in &self.options {
            stdin_text.push_str(&format!("{k}={v}\n"));
        }
        stdin_text.push_str(&format!("action={action}\n"));
        if let Some(p) = plug {
            if p.contains(['\n', '\r', '\0']) {
                return Err(self.err(
                    ErrorKind::Rejected,
                    call,
                    "the plug contains a line break",
                    false,
                ));
            }
            stdin_text.push_str(&format!("plug={p}\n"));
        }
        if let Some(s) = &self.secret {
            stdin_text.push_str("password=");
            stdin_text.push_str(s.expose());
            stdin_text.push('\n');
        }
        let mut child = tokio::process::Command::new(&path)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                self.err(
                    ErrorKind::Unsupported,
                    call,
                    format!("cannot start {}: {e}", path.display()),
                    false,
                )
            })?;
        let mut killer = GroupKiller(child.id());
        let started = Instant::now();
        let mut stdin = child.stdin.take().expect("piped");
        let mut out = child.stdout.take().expect("piped").take(MAX_OUTPUT);
        let mut errp = child.stderr.take().expect("piped").take(MAX_OUTPUT);
        let work = async {
            // A agent that does not read stdin must not block us: ignore a broken pipe.
            let _ = stdin.write_all(stdin_text.as_bytes()).await;
            drop(stdin);
            let mut o = Vec::new();
            let mut e = Vec::new();
            let (_, _, status) = tokio::join!(
                out.read_to_end(&mut o),
                errp.read_to_end(&mut e),
                child.wait()
            );
            (o, e, status)
        };
        let result = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err((ErrorKind::Cancelled, "cancelled".to_owned())),
            () = tokio::time::sleep_until(ctx.deadline) => Err((ErrorKind::Timeout, format!(
                "{} {action} did not finish within the deadline ({:.1} s); its process group was killed",
                self.agent, started.elapsed().as_secs_f64()))),
            r = work => Ok(r),
        };
        match result {
            Err((kind, msg)) => {
                killer.kill();
                tracing::warn!(controller = %self.id, agent = %self.agent, action, "Killed the fence agent's process group: {msg}");
                Err(self.err(kind, call, msg, unknown))
            }
            Ok((o, e, status)) => {
                killer.0 = None;
                let status = status.map_err(|e| {
                    self.err(
                        ErrorKind::Protocol,
                        call,
                        format!("waiting for the agent: {e}"),
                        unknown,
                    )
                })?;
                let run = Run {
                    code: status.code(),
                    stdout: self.redact(String::from_utf8_lossy(&o).into_owned()),
                    stderr: self.redact(String::from_utf8_lossy(&e).into_owned()),
                };
                tracing::debug!(controller = %self.id, agent = %self.agent, action, code = ?run.code,
                    elapsed_ms = started.elapsed().as_millis() as u64, "The fence agent finished");
                Ok(run)
            }
        }
    }

    async fn metadata(&self, ctx: &CallContext) -> Result<&Metadata, DriverError> {
        self.metadata
            .get_or_try_init(|| async {
                let call = "metadata";
                let run = self.run(ctx, call, "metadata", None).await?;
                if run.code != Some(0) {
                    return Err(self.err(
                        ErrorKind::Protocol,
                        call,
                        format!(
                            "{} metadata failed ({}): {}",
                            self.agent,
                            run.code_str(),
                            run.said()
                        ),
                        false,
                    ));
                }
                Metadata::parse(&run.stdout).ok_or_else(|| {
                    self.err(
                        ErrorKind::Protocol,
                        call,
                        format!(
                            "{} metadata printed no <resource-agent> element",
                            self.agent
                        ),
                        false,
                    )
                })
            })
            .await
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

    fn reading(&self, ctx: &CallContext, holds: bool, detail: String) -> Reading {
        Reading {
            holds,
            detail,
            at: SystemTime::now(),
            by: ctx.orchestrator.clone(),
            definitive: false,
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
                    return Ok(self.reading(ctx, want_off, detail));
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

impl Build for FenceAgentDriver {
    const TYPE: ControllerType = ControllerType::FenceAgent;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::FenceAgent {
            agent,
            options,
            level,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        FenceAgentDriver::new(id.clone(), agent, options, *level, secret.map(Secret::from))
            .map_err(|e| e.into_build_error(&id))
    }
}

impl Driver for FenceAgentDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::FenceAgent
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        let md = self.metadata(ctx).await?.clone();
        let mut facts = BTreeMap::new();
        facts.insert("agent".into(), md.name.clone());
        facts.insert("description".into(), md.shortdesc.clone());
        facts.insert(
            "actions".into(),
            md.actions.iter().cloned().collect::<Vec<_>>().join(","),
        );
        let mut warnings = Vec::new();
        if !md.actions.contains("on") {
            warnings.push(format!(
                "{} has no on action: its fences cannot be undone by qfence",
                self.agent
            ));
        }
        if md.parameters.contains("password") && self.secret.is_none() {
            warnings.push(format!(
                "{} takes a password but the controller names no secret",
                self.agent
            ));
        }
        if self.options.get("ssl_insecure").is_some_and(|v| v != "0") {
            warnings.push(format!(
                "controller {}: ssl_insecure is set: the agent does not check the device's certificate",
                self.id
            ));
        }
        let missing: Vec<&str> = ["off", "status"]
            .into_iter()
            .filter(|a| !md.actions.contains(*a))
            .collect();
        let grade = if !missing.is_empty() {
            CapabilityGrade {
                capability: POWER_OFF.into(),
                grade: Grade::Failed,
                reason: format!(
                    "{} does not advertise {}",
                    self.agent,
                    missing.join(" and ")
                ),
            }
        } else if md.actions.contains("monitor") {
            let run = self.run(ctx, "probe monitor", "monitor", None).await?;
            if run.code == Some(0) {
                CapabilityGrade {
                    capability: POWER_OFF.into(),
                    grade: Grade::Inferred,
                    reason: format!(
                        "{} advertises off and status and its monitor action reached the device with these \
                         credentials; the device does not show whether they may power off",
                        self.agent
                    ),
                }
            } else {
                CapabilityGrade {
                    capability: POWER_OFF.into(),
                    grade: Grade::Failed,
                    reason: format!(
                        "{} monitor failed ({}): {}",
                        self.agent,
                        run.code_str(),
                        run.said()
                    ),
                }
            }
        } else {
            CapabilityGrade {
                capability: POWER_OFF.into(),
                grade: Grade::Unverifiable,
                reason: format!(
                    "{} advertises off and status but has no monitor action to test the device",
                    self.agent
                ),
            }
        };
        Ok(Probe {
            identity: Identity {
                id: self.identity_id(),
                facts,
                tls_fingerprint: None,
            },
            grades: vec![grade],
            warnings,
        })
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        let md = self.metadata(ctx).await?;
        if !md.actions.contains("list") {
            return Ok(Vec::new());
        }
        let run = self.run(ctx, "discover", "list", None).await?;
        if run.code != Some(0) {
            return Err(self.err(
                ErrorKind::Unreachable,
                "discover",
                format!(
                    "{} list failed ({}): {}",
                    self.agent,
                    run.code_str(),
                    run.said()
                ),
                false,
            ));
        }
        Ok(run
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("NOTICE:") && !l.contains("ERROR"))
            .map(|l| {
                let (plug, alias) = l.split_once(',').unwrap_or((l, ""));
                Discovered {
                    capability: POWER_OFF.into(),
                    resource: plug.trim().to_owned(),
                    description: if alias.trim().is_empty() {
                        format!("plug {}", plug.trim())
                    } else {
                        format!("plug {} ({})", plug.trim(), alias.trim())
                    },
                }
            })
            .collect())
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        let call = "power.off check-binding";
        if let Err(e) = self.check_capability(call, target) {
            return Ok(vec![e.message]);
        }
        let md = self.metadata(ctx).await?;
        let mut problems = Vec::new();
        for a in ["off", "status"] {
            if !md.actions.contains(a) {
                problems.push(format!("{} has no {a} action", self.agent));
            }
        }
        if md.actions.contains("list") {
            let plugs = self.discover(ctx).await?;
            if !plugs.is_empty() && !plugs.iter().any(|d| d.resource == target.resource) {
                problems.push(format!(
                    "plug {:?} is not listed by {} (it lists {})",
                    target.resource,
                    self.agent,
                    plugs
                        .iter()
                        .map(|d| d.resource.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if problems.is_empty()
            && let Err(e) = self.status(ctx, call, &target.resource).await
        {
            problems.push(e.message);
        }
        Ok(problems)
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.off check";
        self.check_capability(call, target)?;
        let (off, detail) = self.status(ctx, call, &target.resource).await?;
        Ok(self.reading(ctx, off, detail))
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.off";
        self.check_capability(call, target)?;
        // Already off is success, and needs no action.
        if let Ok((true, detail)) = self.status(ctx, call, &target.resource).await {
            return Ok(self.reading(ctx, true, format!("{detail} (already off)")));
        }
        let r = self.act(ctx, call, target, "off", true).await?;
        tracing::info!(controller = %self.id, resource = %target.resource, "Fence verified by read-back: {}", r.detail);
        Ok(r)
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        self.act(ctx, "power.on", target, "on", false).await
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
