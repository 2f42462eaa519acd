//! The [`Driver`] and [`Build`] contracts over the client.

use super::*;

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
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
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

impl Driver for PostgresDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
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
                &[HEALTH, LAG, PROMOTE, DEMOTE, STANDBY]
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
            if ![HEALTH, LAG, PROMOTE, DEMOTE, STANDBY, REJOIN]
                .contains(&target.capability.as_str())
            {
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
            if target.capability == REJOIN {
                problems.extend(self.check_rejoin(target));
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
                STANDBY => self.standby(ctx, target).await,
                PROMOTE => {
                    let c = self.connect(&self.dbname).await?;
                    self.promote_reading(ctx, &c).await
                }
                DEMOTE => match self.local(DEMOTE, target)? {
                    Some(l) => self.stopped_reading(ctx, &l).await,
                    None => self.demote_reading(ctx).await,
                },
                REJOIN => self.rejoin_reading(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                PROMOTE => self.promote(ctx).await,
                DEMOTE => match self.local(DEMOTE, target)? {
                    Some(l) => self.clean_stop(ctx, &l).await,
                    None => self.demote(ctx).await,
                },
                REJOIN => self.rejoin(ctx, target).await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }
}
