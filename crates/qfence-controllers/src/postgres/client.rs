//! Connections: TLS through the shared verifier, errors mapped onto the contract's kinds,
//! and whether the server is in recovery.

use super::*;

impl PostgresDriver {
    pub(super) fn map(&self, call: &str, e: &tokio_postgres::Error, write: bool) -> DriverError {
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

    pub(super) fn tls_setup(&self) -> &Result<PgTls, String> {
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
    pub(super) fn rustls_config(&self, call: &str) -> Result<rustls::ClientConfig, DriverError> {
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

    pub(super) async fn connect_to(
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

    pub(super) async fn connect(&self, dbname: &str) -> Result<Conn, DriverError> {
        let call = format!("connect {}:{}/{dbname}", self.host, self.port);
        let tls = self.rustls_config(&call)?;
        self.connect_to(dbname, tls)
            .await
            .map_err(|e| self.map(&call, &e, false))
    }
}

impl PostgresDriver {
    pub(super) async fn in_recovery(&self, c: &Conn) -> Result<bool, DriverError> {
        let row = c
            .client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await
            .map_err(|e| self.map("SELECT pg_is_in_recovery()", &e, false))?;
        Ok(row.get(0))
    }
}
