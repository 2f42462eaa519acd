//! PostgreSQL driver (tokio-postgres, SQL only).
//!
//! The model: the controller points at one server. What it can do over SQL:
//!
//! - `db.health`: it accepts a connection and answers `SELECT 1`; the reading names its role
//!   (primary or replica). The optional binding parameter `expect_role` (`primary` or
//!   `replica`) makes the other role count as unhealthy. A connection the server's host
//!   refuses (nothing listens) is a *definitive* unhealthy reading (`Reading::definitive`),
//!   which `failover_after_definitive` may act on at once; a timeout or an unreachable
//!   network is an error (UNKNOWN), as before.
//! - `replication.lag` (readiness, on a replica): bytes behind the primary's end of WAL as
//!   the WAL receiver last heard it (`pg_stat_wal_receiver.latest_end_lsn`, or the last
//!   received position when the receiver is gone), and seconds since the last replayed
//!   commit (zero when nothing is left to replay; a streaming replica that replayed no commit
//!   since it started is judged by its bytes alone). Limits: `max_lag_bytes` (default 1 MiB)
//!   and `max_lag_seconds` (default 30).
//! - `db.promote` (switchover): `pg_promote(false)` (signal only: its own wait polls every
//!   100 ms), then the read-back `pg_is_in_recovery() = false` every 10 ms until the promotion
//!   shows or the deadline passes. The reading names the time it took ("promote N ms").
//! - `db.demote` (application fence, never a proof that a site stopped: it is secondary):
//!   puts a block of `reject` lines for every non-template database at the top of
//!   `pg_hba.conf` (written over SQL with `COPY ... TO`, then `pg_reload_conf()`), and
//!   terminates the client sessions, working from `template1`. Not `ALTER DATABASE ...
//!   ALLOW_CONNECTIONS false` or `NOLOGIN`: catalog changes replicate to the standby about to
//!   be promoted, a file does not. It holds when a client connection to the endpoint's
//!   database is refused by pg_hba.conf and no client session is left; a server in recovery
//!   (a standby) accepts no writes, so it holds there too. With the binding parameter
//!   `data_dir` (the orchestrator runs on the server's host) it is a clean stop instead: a
//!   `CHECKPOINT`, `pg_ctl stop -m fast -W` (signal only) with `postmaster.pid` watched every
//!   10 ms until the postmaster is gone, read back by `pg_controldata` ("shut down"); the
//!   reading names each step's time. There is no undo: `db.rejoin` brings the copy back as a
//!   replica.
//! - `db.rejoin` (rejoin, at a site that is not the owner; needs `data_dir`,
//!   `primary_conninfo`, `rewind_conninfo`): pg_rewind from the owner (or, when it fails, a
//!   re-clone by pg_basebackup over `primary_conninfo`, the old directory kept as
//!   `DATA.diverged`), a fresh `standby.signal` and `primary_conninfo`, start; holds when the
//!   server is in recovery and streaming from `primary_conninfo`'s host and port. Never
//!   promotes (ADR 0023).
//!
//! - `db.standby` (standby, in a plan with `standby: hot`): in recovery, read-only, and its
//!   WAL receiver streams from the owner's address (the binding's param for the site the
//!   check is for); the reading shows "standby, replicating from H:P, lag N bytes", or why it
//!   is not safe (writable, follows another server, follows no one). See `standby.rs`.
//!
//! Identity: `system_identifier` (shared by a primary and the standbys cloned from it: it
//! names the lineage) plus the server's address, which tells the members apart.
//!
//! Privileges are graded from the server's own ACL evaluation (`has_function_privilege`,
//! `pg_has_role`, `rolsuper`), hence proven, except the session-terminating part of
//! `db.demote` for non-superusers, whose run-time rule the ACL does not show (inferred).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, Grade};
use secrecy::{ExposeSecret, SecretString};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, unsupported,
};

mod client;
mod driver;
mod local;
mod probe;
mod reads;
mod roles;
mod standby;

const HEALTH: &str = "db.health";

/// Whether a connection failed because the server's host refused it (TCP reset, or a Unix
/// socket with no listener): an answer from the host, not a lost one.
fn connection_refused(e: &tokio_postgres::Error) -> bool {
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        src = s.source();
    }
    false
}
const LAG: &str = "replication.lag";
const PROMOTE: &str = "db.promote";
const DEMOTE: &str = "db.demote";
const STANDBY: &str = "db.standby";
const REJOIN: &str = "db.rejoin";

/// The lines that open and close the reject block `db.demote` puts at the top of pg_hba.conf.
/// An operator removes the block (and reloads) to let clients back in.
const HBA_BEGIN: &str =
    "# qfence db.demote fence: clients are refused (remove through the end line)";
const HBA_END: &str = "# qfence db.demote fence end";

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Default readiness limits.
const DEFAULT_MAX_LAG_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_LAG_SECONDS: f64 = 30.0;

/// The PostgreSQL driver. Holds the password; never prints it.
pub struct PostgresDriver {
    id: ControllerId,
    config: tokio_postgres::Config,
    host: String,
    port: u16,
    dbname: String,
    tls: qfence_model::config::TlsTrust,
    /// The TLS setup from `tls.rs` (the shared verifier: pin, CA file, roots, insecure), built
    /// on first connection because it reads the CA file.
    tls_setup: OnceLock<Result<PgTls, String>>,
}

/// What a connection needs from the shared TLS setup.
struct PgTls {
    config: rustls::ClientConfig,
    seen: crate::tls::SeenCert,
    warning: Option<String>,
}

impl std::fmt::Debug for PostgresDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresDriver")
            .field("id", &self.id)
            .field(
                "server",
                &format!("{}:{}/{}", self.host, self.port, self.dbname),
            )
            .finish_non_exhaustive()
    }
}

/// An open connection; its connection task ends with it (also when the call is dropped).
struct Conn {
    client: tokio_postgres::Client,
    task: JoinHandle<()>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a replica reports about its replication.
struct LagState {
    in_recovery: bool,
    receiver: Option<String>,
    bytes: Option<f64>,
    age: Option<f64>,
    replay_lsn: Option<String>,
}

impl PostgresDriver {
    fn server(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}
