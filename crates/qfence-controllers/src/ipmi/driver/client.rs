//! One IPMI command over a session of its own: the BMC's address, opening a session at
//! the highest privilege it grants, and completion codes as contract errors.

use super::*;

impl IpmiDriver {
    pub(super) async fn addr(&self, call: &str) -> Result<SocketAddr, DriverError> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        let found = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| {
                DriverError::new(
                    ErrorKind::Unreachable,
                    &self.id,
                    call,
                    format!("cannot resolve {}: {e}", self.host),
                    false,
                )
            })?
            .next();
        found.ok_or_else(|| {
            DriverError::new(
                ErrorKind::Unreachable,
                &self.id,
                call,
                format!("{} resolves to no address", self.host),
                false,
            )
        })
    }

    pub(super) async fn open(&self, call: &str) -> Result<Session, DriverError> {
        let addr = self.addr(call).await?;
        let params = Params {
            addr,
            username: &self.username,
            password: &self.password,
            privileges: &PRIVILEGES,
            suite: self.suite,
            retry: self.retry,
        };
        let s = Session::open(&params)
            .await
            .map_err(|f| self.failed(call, f, false))?;
        tracing::debug!(controller = %self.id, call, privilege = %s.privilege, "Opened an IPMI session");
        Ok(s)
    }

    /// Sends a command and returns its data; a completion code other than 0 is an error.
    /// `changes_state`: whether a lost answer leaves the target's state unknown.
    pub(super) async fn command(
        &self,
        s: &mut Session,
        call: &str,
        name: &str,
        (nf, c): (u8, u8),
        data: &[u8],
        changes_state: bool,
    ) -> Result<Vec<u8>, DriverError> {
        let r = s.request(nf, c, data).await.map_err(|f| {
            let unknown = changes_state && f.maybe_delivered;
            let mut e = self.failed(call, f, unknown);
            e.message = format!("{name}: {}", e.message);
            e
        })?;
        if r.cc != 0 {
            return Err(self.cc_error(call, name, r.cc));
        }
        Ok(r.data)
    }

    pub(super) fn cc_error(&self, call: &str, name: &str, cc: u8) -> DriverError {
        let kind = match cc {
            0xC1 => ErrorKind::Unsupported,
            0xD4 => ErrorKind::Auth,
            _ => ErrorKind::Rejected,
        };
        DriverError::new(
            kind,
            &self.id,
            call,
            format!(
                "{name} answered 0x{cc:02x} ({})",
                wire::completion_code_text(cc)
            ),
            false,
        )
    }
}

impl IpmiDriver {
    pub(super) async fn chassis_status(
        &self,
        s: &mut Session,
        call: &str,
    ) -> Result<wire::ChassisStatus, DriverError> {
        let d = self
            .command(
                s,
                call,
                "Get Chassis Status",
                (netfn::CHASSIS, cmd::GET_CHASSIS_STATUS),
                &[],
                false,
            )
            .await?;
        wire::parse_chassis_status(&d)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false))
    }

    pub(super) async fn watchdog(
        &self,
        s: &mut Session,
        call: &str,
    ) -> Result<WatchdogTimer, DriverError> {
        let d = self
            .command(
                s,
                call,
                "Get Watchdog Timer",
                (netfn::APP, cmd::GET_WATCHDOG),
                &[],
                false,
            )
            .await?;
        wire::parse_watchdog(&d)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, true))
    }
}
