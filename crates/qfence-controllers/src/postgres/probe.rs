//! Grading every capability from the role's attributes, without side effects.

use super::*;

impl PostgresDriver {
    pub(super) async fn grades(&self, c: &Conn) -> Result<Vec<CapabilityGrade>, DriverError> {
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
            if sup || stats {
                g(
                    STANDBY,
                    Grade::Proven,
                    "the role reads pg_stat_wal_receiver's sender (superuser or \
                     pg_read_all_stats)",
                )
            } else {
                g(
                    STANDBY,
                    Grade::Failed,
                    "without pg_read_all_stats the WAL receiver's sender is hidden, so the \
                     standby cannot be shown to follow the owner",
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
            // pg_rewind reads the owner, not this server; its binding's params say where.
            g(
                REJOIN,
                Grade::Inferred,
                "runs pg_ctl and pg_rewind on the server's host: check_binding reads data_dir, \
                 the conninfos and the binaries; the owner's grants show only when it runs",
            ),
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
