//! The server's own files, when the orchestrator runs on its host (the binding names
//! `data_dir`): `db.demote` as a clean stop and `db.rejoin` by pg_rewind (ADR 0023).
//!
//! SQL cannot stop a server and read back that it stopped, nor run pg_rewind on a stopped
//! one, so these run PostgreSQL's own binaries, as the data directory's owner (pg_ctl refuses
//! root). No password is ever on a command line or in the environment: the conninfos name a
//! `passfile=`, which libpq reads.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::*;

/// The files pg_rewind copies from the source that belong to this server (its port, its
/// pg_hba.conf): saved before a rewind and put back after it, as Patroni does.
const OWN_CONFIG: [&str; 4] = [
    "postgresql.conf",
    "postgresql.auto.conf",
    "pg_hba.conf",
    "pg_ident.conf",
];

/// What `db.rejoin` and a local `db.demote` need from the binding.
pub(super) struct Local {
    data: PathBuf,
    bin: PathBuf,
    uid: u32,
    gid: u32,
}

/// A conninfo's `key=value` words (no quoting: refused by `check_conninfo`).
fn conninfo_value<'a>(conninfo: &'a str, key: &str) -> Option<&'a str> {
    conninfo
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Problems with a conninfo parameter: a password on it, or quoting this driver cannot read.
pub(super) fn check_conninfo(key: &str, conninfo: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if conninfo.contains('\'') || conninfo.contains('"') || conninfo.contains('\\') {
        problems.push(format!(
            "params.{key}: write it as plain key=value words, unquoted"
        ));
    }
    if conninfo_value(conninfo, "password").is_some() {
        problems.push(format!(
            "params.{key}: carries a password: name a passfile= instead (a password there would \
             reach a command line or postgresql.auto.conf)"
        ));
    }
    if conninfo_value(conninfo, "host").is_none() {
        problems.push(format!("params.{key}: names no host="));
    }
    problems
}

impl PostgresDriver {
    /// The binding's data directory and binaries, if it names `data_dir`.
    pub(super) fn local(&self, call: &str, target: &Target) -> Result<Option<Local>, DriverError> {
        let Some(data) = target.param(ControllerType::Postgres, "data_dir") else {
            return Ok(None);
        };
        let bin = target
            .param(ControllerType::Postgres, "bin_dir")
            .unwrap_or("/usr/lib/postgresql/15/bin");
        let meta = std::fs::metadata(data).map_err(|e| {
            self.err(
                ErrorKind::Rejected,
                call,
                format!(
                    "params.data_dir {data}: {e} (the orchestrator must run on the server's host)"
                ),
                false,
            )
        })?;
        Ok(Some(Local {
            data: PathBuf::from(data),
            bin: PathBuf::from(bin),
            uid: meta.uid(),
            gid: meta.gid(),
        }))
    }

    /// Runs one of PostgreSQL's binaries as the data directory's owner: its exit status and
    /// output. Killed when the call is dropped (cancellation, deadline).
    async fn run_pg(
        &self,
        l: &Local,
        call: &str,
        args: &[&std::ffi::OsStr],
    ) -> Result<(bool, String), DriverError> {
        let path = l.bin.join(call);
        let mut cmd = tokio::process::Command::new(&path);
        cmd.args(args)
            .current_dir(&l.data)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Switches identity only when not the owner already (the orchestrator as root).
        if effective_uid() != l.uid {
            cmd.uid(l.uid).gid(l.gid);
        }
        let out = cmd.output().await.map_err(|e| {
            self.err(
                ErrorKind::Unsupported,
                call,
                format!("cannot run {}: {e}", path.display()),
                false,
            )
        })?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok((out.status.success(), text.trim().to_owned()))
    }

    /// `pg_controldata`'s "Database cluster state".
    async fn cluster_state(&self, l: &Local) -> Result<String, DriverError> {
        let (ok, text) = self
            .run_pg(l, "pg_controldata", &[l.data.as_os_str()])
            .await?;
        if !ok {
            return Err(self.err(ErrorKind::Protocol, "pg_controldata", text, false));
        }
        Ok(text
            .lines()
            .find_map(|s| s.strip_prefix("Database cluster state:"))
            .map_or_else(|| "?".to_owned(), |s| s.trim().to_owned()))
    }

    /// Whether a postmaster runs on the data directory, read as `pg_ctl status` reads it
    /// (`postmaster.pid`'s first line, that pid alive) without spawning pg_ctl: the clean
    /// stop's watch reads it every 10 ms.
    fn postmaster_runs(&self, l: &Local) -> Result<bool, DriverError> {
        let path = l.data.join("postmaster.pid");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // The postmaster removes its own file as it exits.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.io_err("read", &path, e)),
        };
        // A file being written by a starting postmaster has no pid yet: not proof of a stop.
        let Some(pid) = text
            .lines()
            .next()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .and_then(|p| rustix::process::Pid::from_raw(p.abs()))
        else {
            return Ok(true);
        };
        Ok(process_runs(pid))
    }

    /// A fast shutdown, proven by the postmaster's exit. `-W`: pg_ctl only sends the signal,
    /// and the watch reads `postmaster.pid` every 10 ms, where `-w` polls every 100 ms and
    /// so adds up to 100 ms to a switchover's write gap.
    async fn pg_ctl_stop(&self, l: &Local) -> Result<(), DriverError> {
        let (ok, text) = self
            .run_pg(
                l,
                "pg_ctl",
                &[
                    "stop".as_ref(),
                    "-D".as_ref(),
                    l.data.as_os_str(),
                    "-m".as_ref(),
                    "fast".as_ref(),
                    "-W".as_ref(),
                ],
            )
            .await?;
        // "no server running" (or a stale pid file) is an already stopped server: idempotent.
        if !ok && self.postmaster_runs(l)? {
            return Err(self.err(ErrorKind::Rejected, "pg_ctl stop -m fast", text, true));
        }
        // Bounded by the call's deadline (`CallContext::run`).
        while self.postmaster_runs(l)? {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// `db.demote` with `data_dir`: a checkpoint (so the shutdown is short and the standby has
    /// the WAL before the promotion), then a fast shutdown, read back. The reading names each
    /// step's time (a switchover's write gap is their sum).
    pub(super) async fn clean_stop(
        &self,
        ctx: &CallContext,
        l: &Local,
    ) -> Result<Reading, DriverError> {
        let start = tokio::time::Instant::now();
        if let Ok(c) = self.connect("template1").await {
            if self.in_recovery(&c).await? {
                return self.demote_reading(ctx).await;
            }
            c.client
                .batch_execute("CHECKPOINT")
                .await
                .map_err(|e| self.map("CHECKPOINT", &e, false))?;
        }
        let checkpointed = tokio::time::Instant::now();
        self.pg_ctl_stop(l).await?;
        let stopped = tokio::time::Instant::now();
        let mut r = self.stopped_reading(ctx, l).await?;
        r.detail = format!(
            "{} (CHECKPOINT {} ms, stop {} ms, read-back {} ms)",
            r.detail,
            (checkpointed - start).as_millis(),
            (stopped - checkpointed).as_millis(),
            stopped.elapsed().as_millis()
        );
        Ok(r)
    }

    /// The clean stop's read-back: no postmaster and `pg_controldata` says "shut down"; or a
    /// running standby (it accepts no writes).
    pub(super) async fn stopped_reading(
        &self,
        ctx: &CallContext,
        l: &Local,
    ) -> Result<Reading, DriverError> {
        let state = self.cluster_state(l).await?;
        let runs = self.postmaster_runs(l)?;
        let data = l.data.display();
        if runs {
            if state == "in archive recovery" {
                return Ok(ctx.reading(
                    true,
                    format!(
                        "{}: a standby ({data} {state}): it accepts no writes",
                        self.server()
                    ),
                ));
            }
            return Ok(ctx.reading(
                false,
                format!("{}: a server runs on {data} ({state})", self.server()),
            ));
        }
        let holds = state == "shut down" || state == "shut down in recovery";
        Ok(ctx.reading(
            holds,
            format!(
                "{}: no server runs on {data}; pg_controldata: {state}",
                self.server()
            ),
        ))
    }

    /// `db.rejoin`'s read-back: in recovery and streaming from the host and port of
    /// `primary_conninfo`.
    pub(super) async fn rejoin_reading(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let conninfo = self.rejoin_param(target, "primary_conninfo")?;
        let want_host = conninfo_value(conninfo, "host").unwrap_or("");
        let want_port = conninfo_value(conninfo, "port").unwrap_or("5432");
        let c = match self.connect(&self.dbname).await {
            Ok(c) => c,
            Err(e) => return Ok(ctx.reading(false, format!("{}: {e}", self.server()))),
        };
        let row = c
            .client
            .query_one(
                "SELECT pg_is_in_recovery(), \
                 (SELECT status FROM pg_stat_wal_receiver), \
                 (SELECT sender_host FROM pg_stat_wal_receiver), \
                 (SELECT sender_port FROM pg_stat_wal_receiver)",
                &[],
            )
            .await
            .map_err(|e| self.map("read pg_stat_wal_receiver", &e, false))?;
        let rec: bool = row.get(0);
        let status: Option<String> = row.get(1);
        let host: Option<String> = row.get(2);
        let port: Option<i32> = row.get(3);
        let from = format!(
            "{}:{}",
            host.as_deref().unwrap_or("?"),
            port.map_or_else(|| "?".to_owned(), |p| p.to_string())
        );
        let holds = rec
            && status.as_deref() == Some("streaming")
            && host.as_deref() == Some(want_host)
            && port.map(|p| p.to_string()).as_deref() == Some(want_port);
        let detail = if rec {
            format!(
                "{} in recovery, WAL receiver {} from {from} (the owner: {want_host}:{want_port})",
                self.server(),
                status.as_deref().unwrap_or("not running"),
            )
        } else {
            format!("{} is a primary, not a replica", self.server())
        };
        Ok(ctx.reading(holds, detail))
    }

    /// `check_binding`'s problems with a `db.rejoin` binding's parameters.
    pub(super) fn check_rejoin(&self, target: &Target) -> Vec<String> {
        let mut problems = Vec::new();
        for key in ["primary_conninfo", "rewind_conninfo"] {
            match target.param(ControllerType::Postgres, key) {
                Some(c) => problems.extend(check_conninfo(key, c)),
                None => problems.push(format!("params.{key}: db.rejoin needs it")),
            }
        }
        match self.local(REJOIN, target) {
            Ok(Some(l)) => {
                // pg_basebackup re-clones the copy when pg_rewind fails.
                for bin in ["pg_rewind", "pg_basebackup"] {
                    if !l.bin.join(bin).exists() {
                        problems.push(format!("params.bin_dir: no {bin} in {}", l.bin.display()));
                    }
                }
            }
            Ok(None) => problems.push("params.data_dir: db.rejoin needs it".to_owned()),
            Err(e) => problems.push(e.to_string()),
        }
        problems
    }

    fn rejoin_param<'t>(&self, target: &'t Target, key: &str) -> Result<&'t str, DriverError> {
        target.param(ControllerType::Postgres, key).ok_or_else(|| {
            self.err(
                ErrorKind::Rejected,
                REJOIN,
                format!("db.rejoin needs params.{key}"),
                false,
            )
        })
    }

    /// `db.rejoin`: the stopped old primary becomes a replica of the owner. pg_rewind (a
    /// no-op when the timelines did not diverge), this server's own configuration put back, a
    /// fresh `standby.signal` and `primary_conninfo`, start, read back. Never promotes, and
    /// refuses a running primary: stopping one is `db.demote`'s job, under the core's rules.
    pub(super) async fn rejoin(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let first = self.rejoin_reading(ctx, target).await?;
        if first.holds {
            return Ok(first);
        }
        let l = self.local(REJOIN, target)?.ok_or_else(|| {
            self.err(
                ErrorKind::Rejected,
                REJOIN,
                "db.rejoin needs params.data_dir",
                false,
            )
        })?;
        let primary = self.rejoin_param(target, "primary_conninfo")?;
        let rewind = self.rejoin_param(target, "rewind_conninfo")?;
        if self.postmaster_runs(&l)? {
            if let Ok(c) = self.connect("template1").await
                && !self.in_recovery(&c).await?
            {
                return Err(self.err(
                    ErrorKind::Rejected,
                    REJOIN,
                    format!("{} is a running primary: demote it first", self.server()),
                    false,
                ));
            }
            // A standby following someone else: stopped, then pointed at the owner.
            self.pg_ctl_stop(&l).await?;
        }
        // pg_rewind compares timelines by the source's pg_control, which a promotion updates
        // only at its next checkpoint: without one it may see "no rewind required".
        let (ok, text) = self
            .run_pg(
                &l,
                "psql",
                &[
                    "-X".as_ref(),
                    "-q".as_ref(),
                    "-d".as_ref(),
                    rewind.as_ref(),
                    "-c".as_ref(),
                    "CHECKPOINT".as_ref(),
                ],
            )
            .await?;
        if !ok {
            return Err(self.err(ErrorKind::Rejected, "CHECKPOINT at the owner", text, false));
        }
        let how = self.rewind_or_reclone(&l, primary, rewind).await?;
        self.write_standby(&l, primary)?;
        let log = l.data.join("qfence-rejoin.log");
        let (ok, text) = self
            .run_pg(
                &l,
                "pg_ctl",
                &[
                    "start".as_ref(),
                    "-D".as_ref(),
                    l.data.as_os_str(),
                    "-l".as_ref(),
                    log.as_os_str(),
                    "-w".as_ref(),
                ],
            )
            .await?;
        if !ok {
            return Err(self.err(ErrorKind::Rejected, "pg_ctl start", text, true));
        }
        // Streaming starts a moment after the server accepts connections.
        loop {
            let mut r = self.rejoin_reading(ctx, target).await?;
            if r.holds {
                r.detail = format!("{how}: {}", r.detail);
                return Ok(r);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// pg_rewind from the owner (a no-op when the timelines did not diverge), this server's
    /// own configuration put back. When pg_rewind fails (neither `wal_log_hints` nor data
    /// checksums, the WAL it needs is gone, a rewind cut short) the copy cannot be trusted
    /// as it is: a re-clone of the owner replaces it. Says which, in words.
    async fn rewind_or_reclone(
        &self,
        l: &Local,
        primary: &str,
        rewind: &str,
    ) -> Result<String, DriverError> {
        let saved = self.save_config(l)?;
        let source = format!("--source-server={rewind}");
        let ran = self
            .run_pg(
                l,
                "pg_rewind",
                &["-D".as_ref(), l.data.as_os_str(), source.as_ref()],
            )
            .await;
        self.restore_config(l, &saved)?;
        let (ok, text) = ran?;
        if ok {
            tracing::info!(controller = %self.id, output = %text, "Ran pg_rewind for db.rejoin");
            return Ok("rewound".to_owned());
        }
        // pg_rewind's "error:" line says why; its last line is often only a detail.
        let why = text
            .lines()
            .find(|l| l.contains("error:"))
            .or_else(|| text.lines().last())
            .unwrap_or("no output")
            .to_owned();
        tracing::warn!(
            controller = %self.id, output = %text,
            "pg_rewind failed for db.rejoin: re-cloning from the owner"
        );
        let kept = self.reclone(l, primary, &saved).await.map_err(|e| {
            self.err(
                e.kind,
                REJOIN,
                format!(
                    "pg_rewind failed ({why}), and so did the re-clone: {}: {}",
                    e.call, e.message
                ),
                true,
            )
        })?;
        Ok(format!(
            "pg_rewind failed ({why}); re-cloned from the owner, the old copy kept at {}",
            kept.display()
        ))
    }

    /// A fresh copy of the owner by pg_basebackup over `primary` (the replication
    /// connection), made beside the data directory and swapped in once complete, with this
    /// server's own configuration. The old directory is kept (`DATA.diverged`, then
    /// `DATA.diverged.1`, ...), not deleted: it may hold writes the owner never got, which
    /// only an operator can judge. Returns where it was kept.
    async fn reclone(
        &self,
        l: &Local,
        primary: &str,
        saved: &[(PathBuf, Vec<u8>)],
    ) -> Result<PathBuf, DriverError> {
        let beside = |suffix: &str| {
            let mut p = l.data.clone().into_os_string();
            p.push(suffix);
            PathBuf::from(p)
        };
        let clone = beside(".qfence-clone");
        // Only ever ours: a clone an earlier attempt did not finish.
        if clone.exists() {
            std::fs::remove_dir_all(&clone).map_err(|e| self.io_err("remove", &clone, e))?;
        }
        let (ok, text) = self
            .run_pg(
                l,
                "pg_basebackup",
                &[
                    "-D".as_ref(),
                    clone.as_os_str(),
                    "-d".as_ref(),
                    primary.as_ref(),
                    "-X".as_ref(),
                    "stream".as_ref(),
                    "-c".as_ref(),
                    "fast".as_ref(),
                    "-w".as_ref(),
                ],
            )
            .await?;
        if !ok {
            let _ = std::fs::remove_dir_all(&clone);
            return Err(self.err(ErrorKind::Rejected, "pg_basebackup", text, false));
        }
        let kept = (0..)
            .map(|n| match n {
                0 => beside(".diverged"),
                n => beside(&format!(".diverged.{n}")),
            })
            .find(|p| !p.exists())
            .expect("some name is free");
        std::fs::rename(&l.data, &kept).map_err(|e| self.io_err("rename", &l.data, e))?;
        if let Err(e) = std::fs::rename(&clone, &l.data) {
            // Put the old directory back: a server with no data directory is worse.
            let _ = std::fs::rename(&kept, &l.data);
            return Err(self.io_err("rename", &clone, e));
        }
        self.restore_config(l, saved)?;
        tracing::info!(
            controller = %self.id, kept = %kept.display(),
            "Re-cloned the data directory from the owner for db.rejoin"
        );
        Ok(kept)
    }

    fn io_err(&self, call: &str, path: &Path, e: std::io::Error) -> DriverError {
        self.err(
            ErrorKind::Protocol,
            call,
            format!("{}: {e}", path.display()),
            true,
        )
    }

    fn save_config(&self, l: &Local) -> Result<Vec<(PathBuf, Vec<u8>)>, DriverError> {
        OWN_CONFIG
            .iter()
            .map(|f| l.data.join(f))
            .filter(|p| p.exists())
            .map(|p| {
                std::fs::read(&p)
                    .map(|b| (p.clone(), b))
                    .map_err(|e| self.io_err("save configuration", &p, e))
            })
            .collect()
    }

    fn restore_config(&self, l: &Local, saved: &[(PathBuf, Vec<u8>)]) -> Result<(), DriverError> {
        for (p, bytes) in saved {
            self.write_owned(l, p, bytes)?;
        }
        Ok(())
    }

    /// Writes a file in the data directory, owned by its owner.
    fn write_owned(&self, l: &Local, p: &Path, bytes: &[u8]) -> Result<(), DriverError> {
        std::fs::write(p, bytes).map_err(|e| self.io_err("write", p, e))?;
        std::os::unix::fs::chown(p, Some(l.uid), Some(l.gid))
            .map_err(|e| self.io_err("chown", p, e))
    }

    /// `standby.signal`, `primary_conninfo` in postgresql.auto.conf (older ones and
    /// `primary_slot_name` dropped: the owner has no slot for this server), and no qfence
    /// reject block left in pg_hba.conf (an old `db.demote`'s).
    fn write_standby(&self, l: &Local, primary: &str) -> Result<(), DriverError> {
        let auto = l.data.join("postgresql.auto.conf");
        let text = std::fs::read_to_string(&auto).unwrap_or_default();
        let mut out: Vec<String> = text
            .lines()
            .filter(|s| {
                let k = s.trim_start();
                !k.starts_with("primary_conninfo") && !k.starts_with("primary_slot_name")
            })
            .map(str::to_owned)
            .collect();
        out.push(format!("primary_conninfo = {}", quote_literal(primary)));
        self.write_owned(l, &auto, (out.join("\n") + "\n").as_bytes())?;
        let hba = l.data.join("pg_hba.conf");
        if let Ok(text) = std::fs::read_to_string(&hba) {
            let mut inside = false;
            let kept: Vec<&str> = text
                .lines()
                .filter(|s| {
                    let skip = inside || *s == HBA_BEGIN;
                    if *s == HBA_BEGIN {
                        inside = true;
                    } else if *s == HBA_END {
                        inside = false;
                    }
                    !skip
                })
                .collect();
            self.write_owned(l, &hba, (kept.join("\n") + "\n").as_bytes())?;
        }
        self.write_owned(l, &l.data.join("standby.signal"), b"")
    }
}

/// Whether `pid` names a process that has not exited. A stale `postmaster.pid` (a killed
/// postmaster) names a pid that is gone, or a zombie: an exited process its parent has not
/// reaped yet, which a signal 0 still finds (pg_ctl's test). A zombie holds no socket, file or
/// memory, and some inits reap orphans only every few seconds, a clean stop's whole deadline.
fn process_runs(pid: rustix::process::Pid) -> bool {
    // EPERM is a live process of another user.
    if rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH) {
        return false;
    }
    // /proc/PID/stat: "PID (COMM) STATE ...", COMM may hold spaces and parentheses.
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().as_bytes().first()),
            Some(Some(b'Z' | b'X'))
        ),
        // Gone between the two reads, or no /proc: the signal's answer stands.
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// This process's effective uid.
fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::process_runs;

    #[test]
    fn a_zombie_has_stopped_and_a_live_process_runs() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        assert!(process_runs(pid), "a sleeping child runs");
        // Killed but not waited for: a zombie until the wait below reaps it.
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
        let stat = format!("/proc/{}/stat", child.id());
        let deadline = std::time::Duration::from_secs(5);
        let start = qfence_model::time::monotonic_now();
        while !std::fs::read_to_string(&stat).is_ok_and(|s| s.contains(") Z")) {
            assert!(
                start.elapsed() < deadline,
                "the child never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!process_runs(pid), "a zombie has exited");
        child.wait().unwrap();
        assert!(!process_runs(pid), "a reaped pid is gone");
    }
}
