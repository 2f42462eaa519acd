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
//!   commit (zero when nothing is left to replay). Limits: `max_lag_bytes` (default 1 MiB)
//!   and `max_lag_seconds` (default 30).
//! - `db.promote` (switchover): `pg_promote(true, N)`, then the read-back
//!   `pg_is_in_recovery() = false`. A `false` from `pg_promote` only means it did not finish
//!   in N seconds, so the driver keeps reading until the promotion shows or the deadline
//!   passes.
//! - `db.demote` (application fence, never a proof that a site stopped: it is secondary):
//!   puts a block of `reject` lines for every non-template database at the top of
//!   `pg_hba.conf` (written over SQL with `COPY ... TO`, then `pg_reload_conf()`), and
//!   terminates the client sessions, working from `template1`. Not `ALTER DATABASE ...
//!   ALLOW_CONNECTIONS false` or `NOLOGIN`: catalog changes replicate to the standby about to
//!   be promoted, a file does not. It holds when a client connection to the endpoint's
//!   database is refused by pg_hba.conf and no client session is left; a server in recovery
//!   (a standby) accepts no writes, so it holds there too. Postgres has no SQL demote: re-attaching the old primary
//!   as a standby is an operator's job (pg_rewind), so there is no undo.
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
use std::time::{Duration, SystemTime};

use qfence_model::config::{ControllerConfig, ControllerKind};
use qfence_model::{ControllerId, ControllerType, Grade};
use secrecy::{ExposeSecret, SecretString};
use tokio::task::JoinHandle;
use tokio_postgres::error::SqlState;

use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target, unsupported,
};

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

/// Builds the driver from `postgresql://host:port/dbname[?sslmode=...]`, the username and the
/// password (the secret). No I/O. `sslmode` defaults to `prefer`; `require` uses the
/// controller's `tls` trust.
impl Build for PostgresDriver {
    const TYPE: ControllerType = ControllerType::Postgres;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let bad = |kind, msg: String| DriverError::new(kind, &id, "build", msg, false);
        let ControllerKind::Postgres { endpoint, username } = &config.kind else {
            return Err(DriverError::wrong_type(
                &id,
                config,
                ControllerType::Postgres,
            ));
        };
        if endpoint.username() != "" || endpoint.password().is_some() {
            return Err(bad(
                ErrorKind::Rejected,
                "the endpoint must not carry credentials: use `username` and `secret`".to_owned(),
            ));
        }
        let mut pg = tokio_postgres::Config::from_str(endpoint.as_str())
            .map_err(|e| bad(ErrorKind::Rejected, format!("endpoint: {e}")))?;
        pg.user(username);
        if let Some(s) = &secret {
            pg.password(s.expose_secret());
        }
        pg.connect_timeout(config.timeout);
        pg.application_name("qfence");
        let host = endpoint.host_str().unwrap_or("localhost").to_owned();
        let port = endpoint.port().unwrap_or(5432);
        let dbname = pg.get_dbname().unwrap_or("postgres").to_owned();
        Ok(PostgresDriver {
            id,
            config: pg,
            host,
            port,
            dbname,
            tls: config.tls.clone(),
            tls_setup: OnceLock::new(),
        })
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
    fn err(
        &self,
        kind: ErrorKind,
        call: &str,
        msg: impl Into<String>,
        unknown: bool,
    ) -> DriverError {
        DriverError::new(kind, &self.id, call, msg, unknown)
    }

    fn map(&self, call: &str, e: &tokio_postgres::Error, write: bool) -> DriverError {
        if let Some(db) = e.as_db_error() {
            let code = db.code();
            let kind = if *code == SqlState::INVALID_PASSWORD
                || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            {
                ErrorKind::Auth
            } else {
                ErrorKind::Rejected
            };
            return self.err(
                kind,
                call,
                format!("{} ({})", db.message(), code.code()),
                // A failed statement that writes (COPY to pg_hba.conf, pg_promote) may have
                // done part of its work.
                write,
            );
        }
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        let kind = if msg.contains("timed out") {
            ErrorKind::Timeout
        } else {
            ErrorKind::Unreachable
        };
        self.err(kind, call, msg, write)
    }

    fn tls_setup(&self) -> &Result<PgTls, String> {
        self.tls_setup.get_or_init(|| {
            crate::tls::client_config(self.id.as_str(), &self.tls)
                .map(|t| PgTls {
                    config: t.config,
                    seen: t.seen,
                    warning: t.warning,
                })
                .map_err(|e| e.to_string())
        })
    }

    /// The rustls configuration for a connection: the shared verifier, or, when it cannot be
    /// set up (an unreadable CA file) and the endpoint says `sslmode=disable`, one that trusts
    /// nothing (it is never used).
    fn rustls_config(&self, call: &str) -> Result<rustls::ClientConfig, DriverError> {
        match self.tls_setup() {
            Ok(t) => Ok(t.config.clone()),
            Err(_) if self.config.get_ssl_mode() == tokio_postgres::config::SslMode::Disable => {
                let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map(|b| {
                        b.with_root_certificates(rustls::RootCertStore::empty())
                            .with_no_client_auth()
                    })
                    .map_err(|e| self.err(ErrorKind::Protocol, call, e.to_string(), false))
            }
            Err(reason) => Err(self.err(ErrorKind::Unreachable, call, reason.clone(), false)),
        }
    }

    async fn connect_to(
        &self,
        dbname: &str,
        tls: rustls::ClientConfig,
    ) -> Result<Conn, tokio_postgres::Error> {
        let mut config = self.config.clone();
        config.dbname(dbname);
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
        let (client, connection) = config.connect(tls).await?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn { client, task })
    }

    async fn connect(&self, dbname: &str) -> Result<Conn, DriverError> {
        let call = format!("connect {}:{}/{dbname}", self.host, self.port);
        let tls = self.rustls_config(&call)?;
        self.connect_to(dbname, tls)
            .await
            .map_err(|e| self.map(&call, &e, false))
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

    fn server(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    async fn in_recovery(&self, c: &Conn) -> Result<bool, DriverError> {
        let row = c
            .client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(|e| self.map("SELECT pg_is_in_recovery()", &e, false))?;
        Ok(row.get(0))
    }

    async fn health(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = format!("connect {}:{}/{}", self.host, self.port, self.dbname);
        let tls = self.rustls_config(&call)?;
        let c = match self.connect_to(&self.dbname, tls).await {
            Ok(c) => c,
            // The host answered and nothing listens: the server is down, in its host's own
            // word. A timeout, an unreachable network or a server that answers oddly stays
            // an error (ambiguous: UNKNOWN).
            Err(e) if connection_refused(&e) => {
                let mut r = self.reading(
                    ctx,
                    false,
                    format!(
                        "{} refused the connection: no server listens there (its host answered)",
                        self.server()
                    ),
                );
                r.definitive = true;
                return Ok(r);
            }
            Err(e) => return Err(self.map(&call, &e, false)),
        };
        let row = c
            .client
            .query_one(
                "SELECT 1, pg_is_in_recovery(), current_setting('server_version')",
                &[],
            )
            .await
            .map_err(|e| self.map("SELECT 1", &e, false))?;
        let one: i32 = row.get(0);
        let replica: bool = row.get(1);
        let version: String = row.get(2);
        let role = if replica { "replica" } else { "primary" };
        let expect = target.param(ControllerType::Postgres, "expect_role");
        let holds = one == 1 && expect.is_none_or(|e| e == role);
        let mut detail = format!(
            "{} answers SELECT 1; {role}; PostgreSQL {version}",
            self.server()
        );
        if let Some(e) = expect.filter(|e| *e != role) {
            detail.push_str(&format!(" (binding expects {e})"));
        }
        Ok(self.reading(ctx, holds, detail))
    }

    fn limit<T: FromStr>(&self, target: &Target, key: &str, default: T) -> Result<T, DriverError> {
        match target.param(ControllerType::Postgres, key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                self.err(
                    ErrorKind::Rejected,
                    LAG,
                    format!("params.{key}: {v:?} is not a number"),
                    false,
                )
            }),
        }
    }

    async fn lag_state(&self, c: &Conn) -> Result<LagState, DriverError> {
        let sql = "SELECT pg_is_in_recovery(), \
              (SELECT status FROM pg_stat_wal_receiver), \
              pg_wal_lsn_diff(GREATEST((SELECT latest_end_lsn FROM pg_stat_wal_receiver), \
                                       pg_last_wal_receive_lsn()), \
                              pg_last_wal_replay_lsn())::float8, \
              extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, \
              pg_last_wal_replay_lsn()::text";
        let row = c
            .client
            .query_one(sql, &[])
            .await
            .map_err(|e| self.map("read replication state", &e, false))?;
        Ok(LagState {
            in_recovery: row.get(0),
            receiver: row.get(1),
            bytes: row.get(2),
            age: row.get(3),
            replay_lsn: row.get(4),
        })
    }

    async fn lag(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let max_bytes: u64 = self.limit(target, "max_lag_bytes", DEFAULT_MAX_LAG_BYTES)?;
        let max_secs: f64 = self.limit(target, "max_lag_seconds", DEFAULT_MAX_LAG_SECONDS)?;
        let c = self.connect(&self.dbname).await?;
        let s = self.lag_state(&c).await?;
        if !s.in_recovery {
            return Ok(self.reading(
                ctx,
                false,
                format!("{} is not a replica (not in recovery)", self.server()),
            ));
        }
        let receiver = s.receiver.as_deref().unwrap_or("not running");
        let Some(bytes) = s.bytes else {
            return Ok(self.reading(
                ctx,
                false,
                format!(
                    "{}: no WAL received by streaming yet (WAL receiver {receiver})",
                    self.server()
                ),
            ));
        };
        // Nothing left to replay: the age of the last commit says nothing about lag.
        let secs = if bytes <= 0.0 { Some(0.0) } else { s.age };
        let holds = bytes <= max_bytes as f64 && secs.is_some_and(|a| a <= max_secs);
        let secs_text = secs.map_or_else(|| "unknown".to_owned(), |a| format!("{a:.1}"));
        let mut detail = format!(
            "{} replica {bytes:.0} bytes behind (limit {max_bytes}), {secs_text} s since last \
             replay (limit {max_secs}), replayed to {}, WAL receiver {receiver}",
            self.server(),
            s.replay_lsn.as_deref().unwrap_or("?"),
        );
        if s.receiver.as_deref() != Some("streaming") {
            detail.push_str("; measured against the last WAL received, the primary is not heard");
        }
        Ok(self.reading(ctx, holds, detail))
    }

    async fn promote_reading(&self, ctx: &CallContext, c: &Conn) -> Result<Reading, DriverError> {
        let row = c
            .client
            .query_one(
                "SELECT pg_is_in_recovery(), \
                 CASE WHEN pg_is_in_recovery() THEN NULL \
                      ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END",
                &[],
            )
            .await
            .map_err(|e| self.map("read role", &e, false))?;
        let rec: bool = row.get(0);
        let tli: Option<String> = row.get(1);
        let detail = match (rec, tli) {
            (true, _) => format!("{} is in recovery (a replica)", self.server()),
            (false, Some(t)) => format!(
                "{} is a primary: pg_is_in_recovery()=false, timeline {}",
                self.server(),
                u32::from_str_radix(&t, 16).map_or(t, |n| n.to_string())
            ),
            (false, None) => format!("{} is a primary", self.server()),
        };
        Ok(self.reading(ctx, !rec, detail))
    }

    async fn promote(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        let c = self.connect(&self.dbname).await?;
        if !self.in_recovery(&c).await? {
            return self.promote_reading(ctx, &c).await;
        }
        let left = ctx
            .deadline
            .saturating_duration_since(tokio::time::Instant::now());
        // Half the time left: if pg_promote gives up (false), the other half is for reading
        // whether the promotion finished after all.
        let wait = i32::try_from((left.as_secs() / 2).clamp(1, 60)).unwrap_or(60);
        let row = c
            .client
            .query_one("SELECT pg_promote(true, $1)", &[&wait])
            .await
            .map_err(|e| self.map("SELECT pg_promote(true, N)", &e, true))?;
        let done: bool = row.get(0);
        if !done {
            tracing::warn!(
                controller = %self.id,
                "pg_promote returned false; reading until the promotion shows or the deadline passes"
            );
        }
        // Believe the read-back only; a false from pg_promote may still complete later.
        loop {
            if !self.in_recovery(&c).await? {
                return self.promote_reading(ctx, &c).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reads the demote fence from `template1`.
    async fn demote_reading(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        let admin = self.connect("template1").await?;
        if self.in_recovery(&admin).await? {
            return Ok(self.reading(
                ctx,
                true,
                format!(
                    "{} is in recovery (a standby): it accepts no writes",
                    self.server()
                ),
            ));
        }
        let row = admin
            .client
            .query_one(
                "SELECT position($1 IN pg_read_file(current_setting('hba_file'))) > 0, \
                   (SELECT count(*) FROM pg_stat_activity a JOIN pg_database d ON d.oid = a.datid \
                    WHERE a.backend_type = 'client backend' AND NOT d.datistemplate \
                    AND a.pid <> pg_backend_pid())",
                &[&HBA_BEGIN],
            )
            .await
            .map_err(|e| self.map("read pg_hba.conf and sessions", &e, false))?;
        let fenced_file: bool = row.get(0);
        let sessions: i64 = row.get(1);
        let refused = self.client_refused().await;
        let holds = fenced_file && sessions == 0 && refused.is_some();
        let detail = format!(
            "{}: primary; pg_hba.conf {} the qfence reject block; a client connection to {} is {}; \
             client sessions left: {sessions}",
            self.server(),
            if fenced_file { "holds" } else { "lacks" },
            self.dbname,
            refused.map_or_else(|| "accepted".to_owned(), |m| format!("refused ({m})")),
        );
        Ok(self.reading(ctx, holds, detail))
    }

    /// Tries a client connection to the endpoint's database: the refusal message, if refused
    /// by pg_hba.conf.
    async fn client_refused(&self) -> Option<String> {
        let tls = self.rustls_config("connect").ok()?;
        match self.connect_to(&self.dbname, tls).await {
            Ok(_) => None,
            Err(e) => e
                .as_db_error()
                .filter(|d| *d.code() == SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
                .filter(|d| d.message().contains("pg_hba.conf rejects"))
                .map(|d| d.message().to_owned()),
        }
    }

    async fn demote(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        let admin = self.connect("template1").await?;
        if !self.in_recovery(&admin).await? {
            // Database settings (ALLOW_CONNECTIONS, NOLOGIN) would replicate to the standby
            // about to be promoted; pg_hba.conf is a file of this server only.
            let row = admin
                .client
                .query_one(
                    "SELECT current_setting('hba_file'), pg_read_file(current_setting('hba_file')), \
                       (SELECT string_agg(quote_ident(datname), ',' ORDER BY datname) \
                        FROM pg_database WHERE NOT datistemplate)",
                    &[],
                )
                .await
                .map_err(|e| self.map("read pg_hba.conf", &e, false))?;
            let path: String = row.get(0);
            let content: String = row.get(1);
            let dbs: Option<String> = row.get(2);
            if !content.contains(HBA_BEGIN)
                && let Some(dbs) = dbs
            {
                let mut lines = vec![HBA_BEGIN.to_owned()];
                for kind in ["local all", "host all 0.0.0.0/0", "host all ::/0"] {
                    // Names every non-template database: template1 stays open for qfence and
                    // the operator, and `replication` is not a database name, so standbys
                    // still receive the last WAL.
                    let (conn, addr) = kind.split_once(" all").unwrap_or((kind, ""));
                    lines.push(format!("{conn} {dbs} all{addr} reject"));
                }
                lines.push(HBA_END.to_owned());
                lines.extend(
                    content
                        .lines()
                        .map(|l| if l.trim().is_empty() { "#" } else { l }.to_owned()),
                );
                // CSV with control characters as delimiter and quote writes each line as is.
                // COPY takes no parameters, hence literals.
                let array = lines
                    .iter()
                    .map(|l| quote_literal(l))
                    .collect::<Vec<_>>()
                    .join(",");
                let sql = format!(
                    "COPY (SELECT unnest(ARRAY[{array}]::text[])) TO {} \
                     WITH (FORMAT csv, DELIMITER E'\\x01', QUOTE E'\\x02')",
                    quote_literal(&path)
                );
                admin
                    .client
                    .batch_execute(&sql)
                    .await
                    .map_err(|e| self.map("write pg_hba.conf", &e, true))?;
                admin
                    .client
                    .query_one("SELECT pg_reload_conf()", &[])
                    .await
                    .map_err(|e| self.map("pg_reload_conf()", &e, true))?;
            }
            // The postmaster reloads asynchronously: wait until a client is refused.
            while self.client_refused().await.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Waits up to 2 s per session for it to be gone.
            admin
                .client
                .query(
                    "SELECT pg_terminate_backend(a.pid, 2000) FROM pg_stat_activity a \
                     JOIN pg_database d ON d.oid = a.datid \
                     WHERE a.backend_type = 'client backend' AND NOT d.datistemplate \
                     AND a.pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .map_err(|e| self.map("pg_terminate_backend", &e, true))?;
        }
        drop(admin);
        self.demote_reading(ctx).await
    }

    async fn grades(&self, c: &Conn) -> Result<Vec<CapabilityGrade>, DriverError> {
        let row = c
            .client
            .query_one(
                "SELECT r.rolsuper, \
                   has_function_privilege('pg_catalog.pg_promote(boolean,integer)', 'EXECUTE'), \
                   pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'), \
                   pg_has_role(current_user, 'pg_signal_backend', 'USAGE'), \
                   pg_has_role(current_user, 'pg_read_server_files', 'USAGE') \
                   AND pg_has_role(current_user, 'pg_write_server_files', 'USAGE') \
                   AND has_function_privilege('pg_catalog.pg_reload_conf()', 'EXECUTE') \
                 FROM pg_roles r WHERE r.rolname = current_user",
                &[],
            )
            .await
            .map_err(|e| self.map("read privileges", &e, false))?;
        let sup: bool = row.get(0);
        let promote: bool = row.get(1);
        let stats: bool = row.get(2);
        let signal: bool = row.get(3);
        let files: bool = row.get(4);
        let g = |capability: &str, grade, reason: &str| CapabilityGrade {
            capability: capability.to_owned(),
            grade,
            reason: reason.to_owned(),
        };
        Ok(vec![
            g(HEALTH, Grade::Proven, "the role connects and runs SELECT 1"),
            if sup || stats {
                g(
                    LAG,
                    Grade::Proven,
                    "the role reads pg_stat_wal_receiver (superuser or pg_read_all_stats)",
                )
            } else {
                g(
                    LAG,
                    Grade::Inferred,
                    "without pg_read_all_stats the WAL receiver's view is hidden; lag is measured \
                     against the last WAL received only",
                )
            },
            if sup || promote {
                g(
                    PROMOTE,
                    Grade::Proven,
                    "has_function_privilege(pg_promote(boolean,integer), EXECUTE) is true",
                )
            } else {
                g(
                    PROMOTE,
                    Grade::Failed,
                    "the role may not execute pg_promote(boolean,integer)",
                )
            },
            if sup {
                g(
                    DEMOTE,
                    Grade::Proven,
                    "superuser: may rewrite pg_hba.conf and end every session",
                )
            } else if files && signal {
                g(
                    DEMOTE,
                    Grade::Inferred,
                    "may read and write server files, reload and signal backends, but can \
                     never end a superuser's session",
                )
            } else {
                g(
                    DEMOTE,
                    Grade::Failed,
                    "needs pg_read_server_files, pg_write_server_files, EXECUTE on \
                     pg_reload_conf() and pg_signal_backend",
                )
            },
        ])
    }
}

impl Driver for PostgresDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::Postgres
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", async {
            let c = self.connect(&self.dbname).await?;
            let row = c
                .client
                .query_one(
                    "SELECT has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE'), \
                     pg_is_in_recovery(), current_setting('server_version')",
                    &[],
                )
                .await
                .map_err(|e| self.map("probe", &e, false))?;
            let can_read_id: bool = row.get(0);
            let replica: bool = row.get(1);
            let version: String = row.get(2);
            if !can_read_id {
                return Err(self.err(
                    ErrorKind::Rejected,
                    "probe",
                    "the role may not execute pg_control_system(): GRANT EXECUTE on it to read \
                     the system identifier",
                    false,
                ));
            }
            let sysid: i64 = c
                .client
                .query_one("SELECT system_identifier FROM pg_control_system()", &[])
                .await
                .map_err(|e| self.map("pg_control_system()", &e, false))?
                .get(0);
            let facts = BTreeMap::from([
                ("system_identifier".to_owned(), sysid.to_string()),
                (
                    "role".to_owned(),
                    if replica { "replica" } else { "primary" }.to_owned(),
                ),
                ("server_version".to_owned(), version),
                ("address".to_owned(), self.server()),
            ]);
            let grades = self.grades(&c).await?;
            Ok(Probe {
                identity: Identity {
                    id: format!("{sysid}@{}", self.server()),
                    facts,
                    // Set when the connection used TLS.
                    tls_fingerprint: self.tls_setup().as_ref().ok().and_then(|t| t.seen.get()),
                },
                grades,
                warnings: self
                    .tls_setup()
                    .as_ref()
                    .ok()
                    .and_then(|t| t.warning.clone())
                    .into_iter()
                    .chain(std::iter::once(
                        "db.demote only refuses connections over SQL: it never proves a site \
                         stopped, so bind it as a secondary fence"
                            .to_owned(),
                    ))
                    .collect(),
            })
        })
        .await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            let c = self.connect(&self.dbname).await?;
            let replica = self.in_recovery(&c).await?;
            let rows = c
                .client
                .query(
                    "SELECT coalesce(application_name, ''), coalesce(client_addr::text, 'local'), \
                     coalesce(state, '?'), coalesce(sync_state, '?') FROM pg_stat_replication \
                     ORDER BY 1",
                    &[],
                )
                .await
                .map_err(|e| self.map("SELECT FROM pg_stat_replication", &e, false))?;
            let replicas: Vec<String> = rows
                .iter()
                .map(|r| {
                    format!(
                        "{} at {} ({}, {})",
                        r.get::<_, String>(0),
                        r.get::<_, String>(1),
                        r.get::<_, String>(2),
                        r.get::<_, String>(3)
                    )
                })
                .collect();
            let role = if replica { "replica" } else { "primary" };
            let description = if replicas.is_empty() {
                format!("{} ({role}), no replicas streaming from it", self.server())
            } else {
                format!(
                    "{} ({role}), replicas: {}",
                    self.server(),
                    replicas.join("; ")
                )
            };
            // The server itself is the one resource; which capabilities fit depends on its role.
            let caps: &[&str] = if replica {
                &[HEALTH, LAG, PROMOTE, DEMOTE]
            } else {
                &[HEALTH, DEMOTE, PROMOTE]
            };
            Ok(caps
                .iter()
                .map(|cap| Discovered {
                    capability: (*cap).to_owned(),
                    resource: "self".to_owned(),
                    description: description.clone(),
                })
                .collect())
        })
        .await
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        ctx.run(&self.id, "check_binding", async {
            if ![HEALTH, LAG, PROMOTE, DEMOTE].contains(&target.capability.as_str()) {
                return Err(unsupported(self, "the capability", target));
            }
            let mut problems = Vec::new();
            let names = ["self".to_owned(), self.host.clone(), self.server()];
            if !names.contains(&target.resource) {
                problems.push(format!(
                    "resource {:?} is not this server: use \"self\" or {}",
                    target.resource,
                    self.server()
                ));
            }
            if target.capability == LAG {
                for key in ["max_lag_bytes", "max_lag_seconds"] {
                    if let Some(v) = target.param(ControllerType::Postgres, key)
                        && v.parse::<f64>().is_err()
                    {
                        problems.push(format!("params.{key}: {v:?} is not a number"));
                    }
                }
            }
            if target.capability == HEALTH
                && let Some(r) = target.param(ControllerType::Postgres, "expect_role")
                && r != "primary"
                && r != "replica"
            {
                problems.push(format!(
                    "params.expect_role: {r:?} is not primary or replica"
                ));
            }
            // The server must answer.
            let c = self.connect(&self.dbname).await?;
            self.in_recovery(&c).await?;
            Ok(problems)
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", async {
            match target.capability.as_str() {
                HEALTH => self.health(ctx, target).await,
                LAG => self.lag(ctx, target).await,
                PROMOTE => {
                    let c = self.connect(&self.dbname).await?;
                    self.promote_reading(ctx, &c).await
                }
                DEMOTE => self.demote_reading(ctx).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                PROMOTE => self.promote(ctx).await,
                DEMOTE => self.demote(ctx).await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }
}
