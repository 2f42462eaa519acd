//! Identity (the GUID) and the grades of power control and the watchdog, read without
//! acting.

use super::*;

impl IpmiDriver {
    /// The GUID that identifies the host: System GUID, else Device GUID, else RAKP 2's.
    pub(super) async fn guid(
        &self,
        s: &mut Session,
        call: &str,
    ) -> Result<(String, &'static str), DriverError> {
        for (c, name) in [
            (cmd::GET_SYSTEM_GUID, "Get System GUID"),
            (cmd::GET_DEVICE_GUID, "Get Device GUID"),
        ] {
            match self
                .command(s, call, name, (netfn::APP, c), &[], false)
                .await
            {
                Ok(d) => {
                    let g = wire::format_guid(&d).map_err(|m| {
                        DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false)
                    })?;
                    return Ok((g, name));
                }
                Err(e) if e.kind == ErrorKind::Unsupported || e.kind == ErrorKind::Rejected => {}
                Err(e) => return Err(e),
            }
        }
        let g = wire::format_guid(&s.rakp_guid)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m.0, false))?;
        Ok((g, "RAKP 2"))
    }

    /// Get Channel Authentication Capabilities, which every IPMI 2.0 BMC answers outside a
    /// session: how logins are guarded, as facts and warnings. Only an unreachable BMC
    /// fails the probe.
    async fn channel_auth(
        &self,
        call: &str,
        facts: &mut BTreeMap<String, String>,
        warnings: &mut Vec<String>,
    ) -> Result<(), DriverError> {
        // Every IPMI 2.0 BMC answers this outside a session; it says how logins are guarded.
        let addr = self.addr(call).await?;
        match session::channel_auth(addr, self.retry).await {
            Ok(a) => {
                facts.insert("kg".into(), if a.kg_set { "set" } else { "not set" }.into());
                if a.anonymous_login {
                    warnings.push(
                        "the BMC allows anonymous login (null user name and password)".into(),
                    );
                }
                if a.null_usernames {
                    warnings.push(
                        "the BMC has a user with a null name enabled: anyone with its password can log in without a user name".into(),
                    );
                }
                if !a.ipmi20 {
                    warnings.push("the BMC does not announce IPMI 2.0 (RMCP+) support".into());
                }
            }
            Err(f) if f.kind == ErrorKind::Unreachable => return Err(self.failed(call, f, false)),
            Err(f) => warnings.push(format!(
                "Get Channel Authentication Capabilities failed: {}",
                f.message
            )),
        }
        Ok(())
    }

    pub(super) async fn probe_inner(&self, _ctx: &CallContext) -> Result<Probe, DriverError> {
        const CALL: &str = "probe";
        let mut facts = BTreeMap::new();
        let mut warnings = Vec::new();
        self.channel_auth(CALL, &mut facts, &mut warnings).await?;
        let mut s = self.open(CALL).await?;

        let (guid, source) = self.guid(&mut s, CALL).await?;
        facts.insert("guid_source".into(), source.into());
        match self
            .command(
                &mut s,
                CALL,
                "Get Device ID",
                (netfn::APP, cmd::GET_DEVICE_ID),
                &[],
                false,
            )
            .await
            .and_then(|d| {
                wire::parse_device_id(&d)
                    .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, CALL, m.0, false))
            }) {
            Ok(d) => {
                facts.insert("manufacturer_id".into(), d.manufacturer_id.to_string());
                facts.insert("product_id".into(), format!("0x{:04x}", d.product_id));
                facts.insert("firmware".into(), d.firmware);
                facts.insert("ipmi_version".into(), d.ipmi_version);
            }
            Err(e) => warnings.push(format!("Get Device ID failed: {}", e.message)),
        }

        // The privilege the BMC gave this session: Get Session Info is its own word on it.
        let (privilege, privilege_source) = match self
            .command(
                &mut s,
                CALL,
                "Get Session Info",
                (netfn::APP, cmd::GET_SESSION_INFO),
                &[0x00],
                false,
            )
            .await
            .ok()
            .and_then(|d| wire::parse_session_info(&d).ok())
            .and_then(|i| {
                facts.insert("user_id".into(), i.user_id.to_string());
                facts.insert("channel".into(), i.channel.to_string());
                i.privilege
            }) {
            Some(p) => (p, "Get Session Info"),
            None => (s.privilege, "Set Session Privilege Level"),
        };
        facts.insert("privilege".into(), privilege.to_string());
        facts.insert("cipher_suite".into(), self.suite.number().to_string());

        let chassis = self.chassis_status(&mut s, CALL).await;
        if let Ok(st) = &chassis {
            facts.insert(
                "power".into(),
                if st.power_on { "on" } else { "off" }.into(),
            );
        }
        // Get NetFn Support exists only where the IPMI 2.0 firmware firewall does.
        let firewall = match s.request(netfn::APP, cmd::GET_NETFN_SUPPORT, &[0x0E]).await {
            Ok(r) => r.cc != 0xC1,
            Err(_) => true,
        };
        let watchdog = self.watchdog(&mut s, CALL).await;
        s.close().await;

        let power_grade = grade_power(
            chassis.as_ref().map(|_| ()).map_err(|e| e.message.as_str()),
            privilege,
            privilege_source,
            firewall,
        );
        let (watchdog_grade, warning) = grade_watchdog(
            watchdog.as_ref().map_err(|e| (e.kind, e.message.as_str())),
            privilege,
        );
        warnings.extend(warning);
        if privilege == Privilege::Administrator {
            warnings.push(
                "the session runs at ADMINISTRATOR; an account limited to OPERATOR is enough for power control and the watchdog"
                    .into(),
            );
        }
        Ok(Probe {
            identity: Identity {
                id: guid,
                facts,
                tls_fingerprint: None,
            },
            grades: vec![
                grade(POWER_OFF, power_grade),
                grade(WATCHDOG, watchdog_grade),
            ],
            warnings,
        })
    }
}

/// Grades `power.off` from what a probe read (protocols.md §2.6): Chassis Control needs
/// OPERATOR, and the BMC's word on the session's privilege is proof unless a firmware
/// firewall may disable single commands.
pub(super) fn grade_power(
    chassis: Result<(), &str>,
    privilege: Privilege,
    privilege_source: &str,
    firewall: bool,
) -> (Grade, String) {
    let operator = privilege >= Privilege::Operator && privilege != Privilege::Oem;
    match (chassis, operator) {
        (Err(m), _) => (
            Grade::Failed,
            format!("Get Chassis Status failed, so power cannot be read back: {m}"),
        ),
        (Ok(()), false) => (
            Grade::Unverifiable,
            format!(
                "the session runs at {privilege} ({privilege_source}); Chassis Control needs OPERATOR, and only sending it would tell"
            ),
        ),
        (Ok(()), true) if firewall => (
            Grade::Inferred,
            format!(
                "the session runs at {privilege} ({privilege_source}) and reads chassis power; the BMC has the firmware firewall, which may disable Chassis Control, and its command enables were not read"
            ),
        ),
        (Ok(()), true) => (
            Grade::Proven,
            format!(
                "the BMC granted the session {privilege} ({privilege_source}), enough for Chassis Control, and answered Get Chassis Status"
            ),
        ),
    }
}

/// Grades `watchdog` from a probe's Get Watchdog Timer, with a warning when the timer's
/// running state cannot be read back.
pub(super) fn grade_watchdog(
    watchdog: Result<&WatchdogTimer, (ErrorKind, &str)>,
    privilege: Privilege,
) -> ((Grade, String), Option<String>) {
    let operator = privilege >= Privilege::Operator && privilege != Privilege::Oem;
    match (watchdog, operator) {
        (Err((ErrorKind::Unsupported, m)), _) => (
            (Grade::Failed, format!("the BMC has no watchdog: {m}")),
            None,
        ),
        (Err((_, m)), _) => (
            (
                Grade::Unverifiable,
                format!("Get Watchdog Timer failed: {m}"),
            ),
            None,
        ),
        (Ok(_), false) => (
            (
                Grade::Unverifiable,
                format!(
                    "the session runs at {privilege}; Set Watchdog Timer needs OPERATOR, and only sending it would tell"
                ),
            ),
            None,
        ),
        (Ok(w), true) if w.running().is_none() => (
            (
                Grade::Unverifiable,
                format!(
                    "the session runs at {privilege}, enough for Set Watchdog Timer, but Get Watchdog Timer answers {} of {} bytes, so an armed timer cannot be read back",
                    w.len,
                    wire::WATCHDOG_ANSWER_LEN
                ),
            ),
            Some(format!(
                "Get Watchdog Timer answers {} of {} bytes: the watchdog's running state cannot be read, so its checks will say UNKNOWN; arming and renewing are reported from Reset Watchdog Timer's acceptance",
                w.len,
                wire::WATCHDOG_ANSWER_LEN
            )),
        ),
        (Ok(_), true) => (
            (
                Grade::Inferred,
                format!(
                    "the session runs at {privilege}, enough for Set Watchdog Timer, and the timer reads back; that its expiry powers the host off is not tested (that would fence it)"
                ),
            ),
            None,
        ),
    }
}

pub(super) fn grade(capability: &str, (grade, reason): (Grade, String)) -> CapabilityGrade {
    CapabilityGrade {
        capability: capability.into(),
        grade,
        reason,
    }
}
