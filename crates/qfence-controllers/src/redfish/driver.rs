//! The [`Driver`] and [`Build`] contracts over the client: power reads, the fence and its
//! undo, each proven by a read-back.

use super::*;

impl RedfishDriver {
    pub(super) fn check_capability(&self, call: &str, target: &Target) -> Result<(), DriverError> {
        match target.capability.as_str() {
            POWER_OFF | POWER_STATUS => Ok(()),
            other => Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!("redfish has no capability {other:?} (it has power.off, power.status)"),
                false,
            )),
        }
    }

    /// The first of `resets` the system allows, and where to post it.
    fn reset_action<'a>(
        &self,
        call: &str,
        sys: &System,
        resets: &[&'a str],
    ) -> Result<(&'a str, String), DriverError> {
        let Some(reset) = resets.iter().find(|r| sys.allows(r)) else {
            return Err(self.err(
                ErrorKind::Unsupported,
                call,
                format!(
                    "the system does not allow {} (it allows {})",
                    resets.join(" or "),
                    sys.allowed.clone().unwrap_or_default().join(", ")
                ),
                false,
            ));
        };
        let Some(target) = sys.reset_target.clone() else {
            return Err(self.err(
                ErrorKind::Unsupported,
                call,
                "the system advertises no #ComputerSystem.Reset action",
                false,
            ));
        };
        Ok((reset, target))
    }

    /// Sends a reset and reads the power state until it is `want`.
    pub(super) async fn reset_and_wait(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
        resets: &[&str],
        want: &str,
    ) -> Result<System, DriverError> {
        let sys = self.system(ctx, auth, call, resource).await?;
        if sys.power == want {
            return Ok(sys);
        }
        let (reset, target) = self.reset_action(call, &sys, resets)?;
        let body = serde_json::json!({ "ResetType": reset });
        let mut attempt = 0;
        let mut monitor = None;
        loop {
            attempt += 1;
            let r = self
                .send(ctx, auth, Method::POST, &target, Some(&body))
                .await;
            match r {
                Ok((s, headers, _)) if s.is_success() => {
                    // 202: a task monitor to watch for an early failure. The proof is still
                    // the power state.
                    if s == StatusCode::ACCEPTED {
                        monitor = headers
                            .get("Location")
                            .and_then(|v| v.to_str().ok())
                            .map(|l| {
                                url::Url::parse(l)
                                    .map(|u| u.path().to_owned())
                                    .unwrap_or_else(|_| l.to_owned())
                            });
                    }
                    break;
                }
                Ok((s, _, bytes)) if s == StatusCode::BAD_REQUEST || s == StatusCode::CONFLICT => {
                    // Never give up on a 400/409: read what the system is now.
                    let now = self.system(ctx, auth, call, resource).await?;
                    if now.power == want {
                        tracing::info!(controller = %self.id, resource, status = %s,
                            "The BMC refused {reset} but the system is already {want}");
                        return Ok(now);
                    }
                    // Some BMCs (Fujitsu) refuse On for a while right after ForceOff: an
                    // unfence retries, with backoff, within its deadline. A fence does not:
                    // its refusal is reported at once so the plan can act on it.
                    if want == "On"
                        && attempt < ATTEMPTS + 2
                        && self.backoff(ctx, attempt * 2).await
                    {
                        continue;
                    }
                    return Err(self.err(
                        ErrorKind::Rejected,
                        call,
                        format!(
                            "the service answered {s} to {reset} ({}) and the system reads {}",
                            brief(&bytes),
                            now.describe()
                        ),
                        false,
                    ));
                }
                Ok((s, _, bytes))
                    if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN =>
                {
                    return Err(self.err(
                        ErrorKind::Auth,
                        call,
                        format!("the service answered {s} to {reset}: {}", brief(&bytes)),
                        false,
                    ));
                }
                Ok((s, _, bytes)) if s.is_server_error() => {
                    if attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                        continue;
                    }
                    return Err(self.err(
                        ErrorKind::Unreachable,
                        call,
                        format!(
                            "the service answered {s} to {reset} {attempt} times: {}",
                            brief(&bytes)
                        ),
                        true,
                    ));
                }
                Ok((s, _, bytes)) => {
                    return Err(self.err(
                        ErrorKind::Protocol,
                        call,
                        format!("unexpected answer {s} to {reset}: {}", brief(&bytes)),
                        true,
                    ));
                }
                Err(e) => {
                    let permanent =
                        e.message.contains("certificate") || e.message.contains("redirect");
                    if !permanent && attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                        continue;
                    }
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
            }
        }
        self.wait_for(ctx, auth, call, resource, want, monitor)
            .await
    }

    /// Polls `PowerState` until it reads `want`, stopping just before the deadline with what
    /// it last read.
    pub(super) async fn wait_for(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
        want: &str,
        mut monitor: Option<String>,
    ) -> Result<System, DriverError> {
        let started = Instant::now();
        let mut last = String::from("nothing read yet");
        loop {
            if let Some(m) = monitor.clone() {
                match self.send(ctx, auth, Method::GET, &m, None).await {
                    // Still running.
                    Ok((s, _, _)) if s == StatusCode::ACCEPTED => {}
                    Ok((s, _, bytes)) if s.is_client_error() || s.is_server_error() => {
                        // The task failed: one last read decides.
                        let now = self.system(ctx, auth, call, resource).await?;
                        if now.power == want {
                            return Ok(now);
                        }
                        return Err(self.err(
                            ErrorKind::Rejected,
                            call,
                            format!(
                                "the reset's task ended with {s} ({}) and the system reads {}",
                                brief(&bytes),
                                now.describe()
                            ),
                            false,
                        ));
                    }
                    // Done (or the monitor is gone): only the power state matters now.
                    _ => monitor = None,
                }
            }
            let left = ctx.deadline.saturating_duration_since(Instant::now());
            if left <= Duration::from_millis(50) {
                return Err(self.err(
                    ErrorKind::Timeout,
                    call,
                    format!(
                        "PowerState did not read {want} within {:.1} s; last read: {last}",
                        started.elapsed().as_secs_f64()
                    ),
                    true,
                ));
            }
            tokio::time::sleep(self.poll_interval.min(left - Duration::from_millis(50))).await;
            match self.system(ctx, auth, call, resource).await {
                Ok(s) if s.power == want => return Ok(s),
                Ok(s) => last = s.describe(),
                // A BMC may answer errors right after a reset; an error is never "off".
                Err(e) if e.kind == ErrorKind::Auth => {
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
    }
}

impl Build for RedfishDriver {
    const TYPE: ControllerType = ControllerType::Redfish;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Redfish {
            endpoint,
            username,
            auth,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let secret = required_secret(&id, Self::TYPE, secret)?;
        RedfishDriver::new(
            id.clone(),
            endpoint,
            username,
            *auth,
            &config.tls,
            Some(secret.into()),
        )
        .map_err(|e| e.into_build_error(&id))
    }
}

impl Driver for RedfishDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        let call = "probe";
        let root = ctx
            .run(&self.id, call, self.get(ctx, &Auth::None, "/redfish/v1/"))
            .await?;
        let mut warnings: Vec<String> = self.http.warning.iter().cloned().collect();
        let (systems, fence) = self
            .authed(ctx, call, async |auth: &Auth| {
                let systems = self.list_systems(ctx, auth).await?;
                let fence = self.grade_fence(ctx, auth, &systems).await;
                Ok((systems, fence))
            })
            .await?;
        if self.auth == RedfishAuth::Session && self.no_sessions.load(Ordering::Relaxed) {
            warnings.push(
                "the service has no SessionService; basic authentication was used (set auth: basic)"
                    .into(),
            );
        }
        let s = |k: &str| root.get(k).and_then(Value::as_str).map(str::to_owned);
        let host = format!(
            "{}:{}",
            self.base.host_str().unwrap_or(""),
            self.base.port_or_known_default().unwrap_or(443)
        );
        let id = match s("UUID") {
            Some(u) => format!("redfish-service:{}", u.to_ascii_lowercase()),
            None => {
                warnings.push("the service root has no UUID; identity is its address".into());
                format!("redfish-endpoint:{host}")
            }
        };
        let mut facts = BTreeMap::new();
        for (k, f) in [
            ("vendor", "Vendor"),
            ("product", "Product"),
            ("redfish_version", "RedfishVersion"),
        ] {
            if let Some(v) = s(f) {
                facts.insert(k.to_owned(), v);
            }
        }
        facts.insert("endpoint".into(), host);
        facts.insert("systems".into(), list_names(&systems));
        let uuids: Vec<String> = systems
            .iter()
            .map(|s| s.uuid.to_ascii_lowercase())
            .collect();
        facts.insert("system_uuids".into(), uuids.join(","));
        let status = if systems.is_empty() {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Failed,
                reason: "the service lists no systems".into(),
            }
        } else if systems.iter().all(|s| !s.power.is_empty()) {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Proven,
                reason: format!(
                    "read PowerState of {} system(s) with these credentials",
                    systems.len()
                ),
            }
        } else {
            CapabilityGrade {
                capability: POWER_STATUS.into(),
                grade: Grade::Failed,
                reason: "a system shows no PowerState".into(),
            }
        };
        Ok(Probe {
            identity: Identity {
                id,
                facts,
                tls_fingerprint: self.http.seen.get(),
            },
            grades: vec![fence, status],
            warnings,
        })
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        let systems = self
            .authed(ctx, "discover", async |auth: &Auth| {
                self.list_systems(ctx, auth).await
            })
            .await?;
        let mut out = Vec::new();
        for cap in [POWER_OFF, POWER_STATUS] {
            for s in &systems {
                out.push(Discovered {
                    capability: cap.into(),
                    resource: s.id.clone(),
                    description: format!(
                        "system {} \"{}\", UUID {}, PowerState {}{}",
                        s.id,
                        s.name,
                        s.uuid,
                        s.power,
                        if cap == POWER_OFF && !s.allows("ForceOff") {
                            " (ForceOff not allowed)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        }
        Ok(out)
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        let call = format!("{} check-binding", target.capability);
        if let Err(e) = self.check_capability(&call, target) {
            return Ok(vec![e.message]);
        }
        self.authed(ctx, &call, async |auth: &Auth| {
            match self.system(ctx, auth, &call, &target.resource).await {
                Ok(s) => {
                    let mut problems = Vec::new();
                    if target.capability == POWER_OFF {
                        if !s.allows("ForceOff") {
                            problems.push(format!(
                                "system {} does not allow ForceOff (it allows {})",
                                s.id,
                                s.allowed.clone().unwrap_or_default().join(", ")
                            ));
                        }
                        if s.reset_target.is_none() {
                            problems.push(format!("system {} has no Reset action", s.id));
                        }
                    }
                    Ok(problems)
                }
                Err(e) if e.kind == ErrorKind::Rejected => Ok(vec![e.message]),
                Err(e) => Err(e),
            }
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = format!("{} check", target.capability);
        self.check_capability(&call, target)?;
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.system(ctx, auth, &call, &target.resource).await
            })
            .await?;
        let holds = if target.capability == POWER_OFF {
            s.power == "Off"
        } else {
            s.power == "On"
        };
        Ok(ctx.reading(holds, s.describe()))
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = target.capability.clone();
        self.check_capability(&call, target)?;
        if target.capability != POWER_OFF {
            return Err(self.err(
                ErrorKind::Unsupported,
                &call,
                "power.status only reads; it has no action",
                false,
            ));
        }
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.reset_and_wait(ctx, auth, &call, &target.resource, &["ForceOff"], "Off")
                    .await
            })
            .await?;
        tracing::info!(controller = %self.id, resource = %target.resource, "Fence verified by read-back: {}", s.describe());
        Ok(ctx.reading(true, s.describe()))
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.on".to_owned();
        self.check_capability(&call, target)?;
        if target.capability != POWER_OFF {
            return Err(crate::driver::unsupported(self, "undo", target));
        }
        let s = self
            .authed(ctx, &call, async |auth: &Auth| {
                self.reset_and_wait(ctx, auth, &call, &target.resource, &["On", "ForceOn"], "On")
                    .await
            })
            .await?;
        Ok(ctx.reading(false, s.describe()))
    }

    /// Deletes the driver's Redfish session, if it has one.
    async fn close(&self) {
        if let Some(s) = self.session.take() {
            self.logout(&s).await;
        }
    }
}
