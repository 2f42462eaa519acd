//! Running an agent: found on the search path, options and the secret on stdin, in a
//! process group of its own killed as a whole at the deadline, its output bounded and redacted.

use super::*;

/// One finished agent run.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) code: Option<i32>,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Run {
    /// The agent's own words about what happened: its last meaningful line.
    pub(super) fn said(&self) -> String {
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

    pub(super) fn code_str(&self) -> String {
        self.code
            .map_or_else(|| "killed by a signal".into(), |c| format!("exit {c}"))
    }
}

/// Kills a process group when dropped, unless disarmed: the agent must not outlive its call,
/// whatever ends the call.
pub(super) struct GroupKiller(Option<u32>);

impl GroupKiller {
    pub(super) fn kill(&mut self) {
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

impl FenceAgentDriver {
    pub(super) fn path(&self, call: &str) -> Result<PathBuf, DriverError> {
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
    pub(super) fn redact(&self, s: String) -> String {
        match &self.secret {
            Some(sec) if !sec.expose().is_empty() && s.contains(sec.expose()) => {
                s.replace(sec.expose(), "[redacted]")
            }
            _ => s,
        }
    }

    /// Runs the agent with one action, under the call's deadline and cancellation.
    pub(super) async fn run(
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
}
