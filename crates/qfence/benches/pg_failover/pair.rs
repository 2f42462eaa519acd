//! The PostgreSQL pair (tools/emulators/start-pg-pair.sh) and the fence agent that stands in
//! for each host's BMC.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A running pair: a primary at `ports[0]` (dc1) streaming to a replica at `ports[1]` (dc2).
pub struct Pair {
    pub run: PathBuf,
    pub ports: [u16; 2],
    pub sockets: PathBuf,
    tools: PathBuf,
}

/// The fence agent: `off` kills the server listening on its port (the postmaster and its
/// children, as a power cut would, while the host stays up), `status` is OFF once none runs.
/// The server is found by its socket's lock file, whose first line is the postmaster's pid.
/// A killed postmaster is a zombie until its parent reaps it: init here, which reaps orphans
/// only every ~2 s (measured: 1.5-1.9 s), so `kill -0` read it ON for longer than the fast
/// profile's three fence attempts. A zombie has exited (no socket, no file, no memory): the
/// agent reads its state from /proc. `status` runs only shell builtins, one process per call,
/// to keep within the controller's 0.5 s timeout on a loaded machine.
const AGENT: &str = r#"#!/bin/sh
action= pgport= sockets=
while IFS='=' read -r k v || [ -n "$k" ]; do
    case $k in action) action=$v;; pgport) pgport=$v;; sockets) sockets=$v;; esac
done
lock="$sockets/.s.PGSQL.$pgport.lock"
pm() {
    [ -f "$lock" ] && read -r p < "$lock" && [ -n "$p" ] && [ -r "/proc/$p/stat" ] || return 1
    read -r _ _ st _ < "/proc/$p/stat" || return 1
    case $st in Z|X) return 1;; esac
    echo "$p"
}
case "$action" in
metadata) cat <<'XML'
<resource-agent name="fence_pgkill" shortdesc="kills a PostgreSQL server (pg_failover bench)">
<parameters><parameter name="pgport" unique="0" required="1"/><parameter name="sockets" unique="0" required="1"/></parameters>
<actions><action name="off"/><action name="status"/><action name="monitor"/><action name="metadata"/></actions>
</resource-agent>
XML
    exit 0;;
monitor) exit 0;;
status) if p=$(pm); then echo "Status: ON"; exit 0; else echo "Status: OFF"; exit 2; fi;;
off) if p=$(pm); then pkill -KILL -P "$p"; kill -KILL "$p"; fi; exit 0;;
*) echo "unsupported action"; exit 1;;
esac
"#;

/// Writes `fence_pgkill` into `dir` (put it on the orchestrator's PATH).
pub fn write_agent(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join("fence_pgkill");
    std::fs::write(&p, AGENT)?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}

impl Pair {
    /// Builds a fresh pair in `run` (a short path: the sockets live there).
    pub fn start(tools: &Path, run: &Path, ports: [u16; 2]) -> Result<Self> {
        std::fs::create_dir_all(run)?;
        let out = Command::new("bash")
            .arg(tools.join("start-pg-pair.sh"))
            .env("QFENCE_EMU_RUN", run)
            .env("PG_PRIMARY_PORT", ports[0].to_string())
            .env("PG_REPLICA_PORT", ports[1].to_string())
            .env("PG_FRESH", "1")
            .output()
            .context("running start-pg-pair.sh")?;
        if !out.status.success() {
            bail!(
                "start-pg-pair.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let env: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let sockets = env
            .get("PG_SOCKETS")
            .context("start-pg-pair.sh printed no PG_SOCKETS")?;
        Ok(Self {
            run: run.to_owned(),
            ports,
            sockets: sockets.into(),
            tools: tools.to_owned(),
        })
    }

    /// Kills the server at `site` (0 = dc1) the way the fence agent does.
    pub fn kill(&self, agent: &Path, site: usize) -> Result<()> {
        use std::io::Write as _;
        let mut child = Command::new(agent)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        let input = format!(
            "action=off\npgport={}\nsockets={}\n",
            self.ports[site],
            self.sockets.display()
        );
        child
            .stdin
            .take()
            .context("agent stdin")?
            .write_all(input.as_bytes())?;
        child.wait()?;
        Ok(())
    }

    /// A pgpass file for `db.rejoin` (pg_rewind and the WAL receiver), owned by the servers'
    /// user with mode 0600, as libpq wants it.
    pub fn passfile(&self) -> Result<PathBuf> {
        use std::os::unix::fs::MetadataExt as _;
        let owner = std::fs::metadata(self.sockets.join("primary"))?;
        let p = self.sockets.join("pgpass");
        std::fs::write(
            &p,
            "127.0.0.1:*:replication:replicator:replpass\n127.0.0.1:*:*:postgres:postgres\n",
        )?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))?;
        std::os::unix::fs::chown(&p, Some(owner.uid()), Some(owner.gid()))?;
        Ok(p)
    }

    /// A libpq URL of the server at `site`, for the bench's own client (superuser, trust
    /// over the socket is not used: TCP with the password).
    pub fn url(&self, site: usize) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres password=postgres dbname=app connect_timeout=2",
            self.ports[site]
        )
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(self.tools.join("stop.sh"))
            .arg("pg-pair")
            .env("QFENCE_EMU_RUN", &self.run)
            .output();
    }
}
