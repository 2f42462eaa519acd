//! `db.standby`: whether a running server is safe as a hot standby of the plan's owner. In
//! its own file so the switchover's rejoin (`db.rejoin`) can grow beside it.
//!
//! It holds when the server is in recovery (`pg_is_in_recovery()`), refuses writes
//! (`transaction_read_only`), and its WAL receiver streams from the owner: the address the
//! binding gives for the target's site (the owner the decision saw), compared with
//! `pg_stat_wal_receiver`'s `sender_host:sender_port`. The detail says why it does not, or
//! "standby, replicating from H:P, lag N bytes". It never says anything stopped.

use super::*;

/// What a server says of itself as a standby.
struct StandbyState {
    in_recovery: bool,
    read_only: String,
    status: Option<String>,
    sender: Option<String>,
    lag_bytes: Option<f64>,
}

impl PostgresDriver {
    async fn standby_state(&self, c: &Conn) -> Result<StandbyState, DriverError> {
        let sql = "SELECT pg_is_in_recovery(), current_setting('transaction_read_only'), \
              r.status, r.sender_host || ':' || r.sender_port::text, \
              pg_wal_lsn_diff(GREATEST(r.latest_end_lsn, pg_last_wal_receive_lsn()), \
                              pg_last_wal_replay_lsn())::float8 \
              FROM (SELECT 1) one LEFT JOIN pg_stat_wal_receiver r ON true";
        let row = c
            .client
            .query_one(sql, &[])
            .await
            .map_err(|e| self.map("read standby state", &e, false))?;
        Ok(StandbyState {
            in_recovery: row.get(0),
            read_only: row.get(1),
            status: row.get(2),
            sender: row.get(3),
            lag_bytes: row.get(4),
        })
    }

    pub(super) async fn standby(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let owner = target.site.as_str();
        let Some(expected) = target.param(ControllerType::Postgres, owner) else {
            return Err(self.err(
                ErrorKind::Rejected,
                STANDBY,
                format!("params.{owner}: the owner's address is not given"),
                false,
            ));
        };
        let c = self.connect(&self.dbname).await?;
        let s = self.standby_state(&c).await?;
        let server = self.server();
        let unsafe_because = if !s.in_recovery {
            Some(format!("{server} is writable: not in recovery (a primary)"))
        } else if s.read_only != "on" {
            Some(format!(
                "{server} is writable: transaction_read_only is {}",
                s.read_only
            ))
        } else {
            match s.sender.as_deref() {
                None => Some(format!(
                    "{server} follows no one: no WAL receiver (owner {owner} at {expected})"
                )),
                Some(from) if !same_address(from, expected) => Some(format!(
                    "{server} follows {from}, not the owner {owner} at {expected}"
                )),
                Some(_) => None,
            }
        };
        if let Some(why) = unsafe_because {
            return Ok(ctx.reading(false, why));
        }
        let status = s.status.as_deref().unwrap_or("?");
        let lag = s.lag_bytes.map_or_else(
            || "unknown".to_owned(),
            |b| format!("{:.0} bytes", b.max(0.0)),
        );
        let word = if status == "streaming" {
            "replicating"
        } else {
            "WAL receiver"
        };
        let detail = if status == "streaming" {
            format!("standby, {word} from {expected}, lag {lag}")
        } else {
            format!("standby, {word} {status} from {expected}, lag {lag}")
        };
        Ok(ctx.reading(true, detail))
    }
}

/// Whether `host:port` as the WAL receiver reports it is `expected` (case-insensitive; a
/// bracketed IPv6 address in either matches its bare form).
fn same_address(from: &str, expected: &str) -> bool {
    let norm = |s: &str| s.trim().replace(['[', ']'], "").to_ascii_lowercase();
    norm(from) == norm(expected)
}
