//! The reads: `db.health` and `replication.lag` with the binding's limits.

use super::*;

impl PostgresDriver {
    pub(super) async fn health(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let call = format!("connect {}:{}/{}", self.host, self.port, self.dbname);
        let tls = self.rustls_config(&call)?;
        let c = match self.connect_to(&self.dbname, tls).await {
            Ok(c) => c,
            // The host answered and nothing listens: the server is down, in its host's own
            // word. A timeout, an unreachable network or a server that answers oddly stays
            // an error (ambiguous: UNKNOWN).
            Err(e) if connection_refused(&e) => {
                let mut r = ctx.reading(
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
        Ok(ctx.reading(holds, detail))
    }

    pub(super) fn limit<T: FromStr>(
        &self,
        target: &Target,
        key: &str,
        default: T,
    ) -> Result<T, DriverError> {
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

    pub(super) async fn lag_state(&self, c: &Conn) -> Result<LagState, DriverError> {
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

    pub(super) async fn lag(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let max_bytes: u64 = self.limit(target, "max_lag_bytes", DEFAULT_MAX_LAG_BYTES)?;
        let max_secs: f64 = self.limit(target, "max_lag_seconds", DEFAULT_MAX_LAG_SECONDS)?;
        let c = self.connect(&self.dbname).await?;
        let s = self.lag_state(&c).await?;
        if !s.in_recovery {
            return Ok(ctx.reading(
                false,
                format!("{} is not a replica (not in recovery)", self.server()),
            ));
        }
        let receiver = s.receiver.as_deref().unwrap_or("not running");
        let Some(bytes) = s.bytes else {
            return Ok(ctx.reading(
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
        Ok(ctx.reading(holds, detail))
    }
}
