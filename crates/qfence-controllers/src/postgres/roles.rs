//! Changing roles: `db.promote`, and `db.demote` as a fence (pg_hba.conf refuses clients,
//! then the primary stops), each proven by a read-back.

use super::*;

impl PostgresDriver {
    pub(super) async fn promote_reading(
        &self,
        ctx: &CallContext,
        c: &Conn,
    ) -> Result<Reading, DriverError> {
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
        Ok(ctx.reading(!rec, detail))
    }

    pub(super) async fn promote(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        let c = self.connect(&self.dbname).await?;
        if !self.in_recovery(&c).await? {
            return self.promote_reading(ctx, &c).await;
        }
        // No wait in pg_promote: its own wait polls every 100 ms, a tenth of a second on
        // every switchover's write gap. The read-back every 10 ms is the proof instead.
        let start = tokio::time::Instant::now();
        let signalled: bool = c
            .client
            .query_one("SELECT pg_promote(false)", &[])
            .await
            .map_err(|e| self.map("SELECT pg_promote(false)", &e, true))?
            .get(0);
        if !signalled {
            // The postmaster could not be signalled; pg_promote removed its signal file.
            return Err(self.err(
                ErrorKind::Rejected,
                "SELECT pg_promote(false)",
                "pg_promote could not signal the postmaster (see the server's log)",
                false,
            ));
        }
        // Bounded by the call's deadline (`CallContext::run`).
        while self.in_recovery(&c).await? {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let promoted = start.elapsed();
        let mut r = self.promote_reading(ctx, &c).await?;
        r.detail = format!("{} (promote {} ms)", r.detail, promoted.as_millis());
        Ok(r)
    }

    /// Reads the demote fence from `template1`.
    pub(super) async fn demote_reading(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        let admin = self.connect("template1").await?;
        if self.in_recovery(&admin).await? {
            return Ok(ctx.reading(
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
        Ok(ctx.reading(holds, detail))
    }

    /// Tries a client connection to the endpoint's database: the refusal message, if refused
    /// by pg_hba.conf.
    pub(super) async fn client_refused(&self) -> Option<String> {
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

    pub(super) async fn demote(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
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
}
