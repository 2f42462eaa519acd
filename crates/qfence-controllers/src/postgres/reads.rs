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
        let (holds, secs_text) = s.judge(bytes, max_bytes, max_secs);
        let mut detail = format!(
            "{} replica {bytes:.0} bytes behind (limit {max_bytes}), {secs_text} (limit \
             {max_secs} s), replayed to {}, WAL receiver {receiver}",
            self.server(),
            s.replay_lsn.as_deref().unwrap_or("?"),
        );
        if s.receiver.as_deref() != Some("streaming") {
            detail.push_str("; measured against the last WAL received, the primary is not heard");
        }
        Ok(ctx.reading(holds, detail))
    }
}

impl LagState {
    /// Whether `bytes` behind and the replay's age are within the limits, and the age as the
    /// reading says it.
    fn judge(&self, bytes: f64, max_bytes: u64, max_secs: f64) -> (bool, String) {
        let streaming = self.receiver.as_deref() == Some("streaming");
        let age = match self.age {
            // Nothing left to replay: the age of the last commit says nothing about lag.
            _ if bytes <= 0.0 => Some(0.0),
            Some(a) => Some(a),
            // No commit replayed since the replica started (PostgreSQL has no timestamp
            // yet). With the primary heard, the bytes behind bound what a promotion would
            // lose and judge alone; without it they are measured against stale WAL.
            None if streaming => {
                return (
                    bytes <= max_bytes as f64,
                    "no commit replayed since start-up, judged by bytes".to_owned(),
                );
            }
            None => None,
        };
        let holds = bytes <= max_bytes as f64 && age.is_some_and(|a| a <= max_secs);
        let said = age.map_or_else(
            || "time since last replay unknown".to_owned(),
            |a| format!("{a:.1} s since last replay"),
        );
        (holds, said)
    }
}

#[cfg(test)]
mod tests {
    use super::LagState;

    fn state(receiver: &str, age: Option<f64>) -> LagState {
        LagState {
            in_recovery: true,
            receiver: Some(receiver.to_owned()),
            bytes: None,
            age,
            replay_lsn: None,
        }
    }

    #[test]
    fn a_replica_that_replayed_no_commit_yet_is_judged_by_bytes_while_it_streams() {
        let fresh = state("streaming", None);
        assert!(fresh.judge(18_824.0, 1 << 26, 10.0).0);
        assert!(!fresh.judge(2e8, 1 << 26, 10.0).0);
        // The primary not heard: the bytes are against stale WAL, nothing is known.
        let cut = state("waiting", None);
        assert_eq!(
            cut.judge(18_824.0, 1 << 26, 10.0),
            (false, "time since last replay unknown".to_owned())
        );
        assert!(cut.judge(0.0, 1 << 26, 10.0).0);
    }

    #[test]
    fn a_known_age_counts_while_there_is_something_to_replay() {
        let s = state("streaming", Some(12.0));
        assert!(!s.judge(100.0, 1 << 26, 10.0).0);
        assert!(s.judge(0.0, 1 << 26, 10.0).0);
        assert!(state("streaming", Some(2.0)).judge(100.0, 1 << 26, 10.0).0);
    }
}
