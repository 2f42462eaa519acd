//! The [`Driver`] and [`Build`] contracts over the agent: status, off and on, each
//! proven by a status read-back.

use super::*;

impl Build for FenceAgentDriver {
    const TYPE: ControllerType = ControllerType::FenceAgent;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::FenceAgent {
            agent,
            options,
            level,
        } = &config.kind
        else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        FenceAgentDriver::new(id.clone(), agent, options, *level, secret.map(Secret::from))
            .map_err(|e| e.into_build_error(&id))
    }
}

impl Driver for FenceAgentDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        let md = self.metadata(ctx).await?.clone();
        let mut facts = BTreeMap::new();
        facts.insert("agent".into(), md.name.clone());
        facts.insert("description".into(), md.shortdesc.clone());
        facts.insert(
            "actions".into(),
            md.actions.iter().cloned().collect::<Vec<_>>().join(","),
        );
        let mut warnings = Vec::new();
        if !md.actions.contains("on") {
            warnings.push(format!(
                "{} has no on action: its fences cannot be undone by qfence",
                self.agent
            ));
        }
        if md.parameters.contains("password") && self.secret.is_none() {
            warnings.push(format!(
                "{} takes a password but the controller names no secret",
                self.agent
            ));
        }
        if self.options.get("ssl_insecure").is_some_and(|v| v != "0") {
            warnings.push(format!(
                "controller {}: ssl_insecure is set: the agent does not check the device's certificate",
                self.id
            ));
        }
        let missing: Vec<&str> = ["off", "status"]
            .into_iter()
            .filter(|a| !md.actions.contains(*a))
            .collect();
        let grade = if !missing.is_empty() {
            CapabilityGrade {
                capability: POWER_OFF.into(),
                grade: Grade::Failed,
                reason: format!(
                    "{} does not advertise {}",
                    self.agent,
                    missing.join(" and ")
                ),
            }
        } else if md.actions.contains("monitor") {
            let run = self.run(ctx, "probe monitor", "monitor", None).await?;
            if run.code == Some(0) {
                CapabilityGrade {
                    capability: POWER_OFF.into(),
                    grade: Grade::Inferred,
                    reason: format!(
                        "{} advertises off and status and its monitor action reached the device with these \
                         credentials; the device does not show whether they may power off",
                        self.agent
                    ),
                }
            } else {
                CapabilityGrade {
                    capability: POWER_OFF.into(),
                    grade: Grade::Failed,
                    reason: format!(
                        "{} monitor failed ({}): {}",
                        self.agent,
                        run.code_str(),
                        run.said()
                    ),
                }
            }
        } else {
            CapabilityGrade {
                capability: POWER_OFF.into(),
                grade: Grade::Unverifiable,
                reason: format!(
                    "{} advertises off and status but has no monitor action to test the device",
                    self.agent
                ),
            }
        };
        Ok(Probe {
            identity: Identity {
                id: self.identity_id(),
                facts,
                tls_fingerprint: None,
            },
            grades: vec![grade],
            warnings,
        })
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        let md = self.metadata(ctx).await?;
        if !md.actions.contains("list") {
            return Ok(Vec::new());
        }
        let run = self.run(ctx, "discover", "list", None).await?;
        if run.code != Some(0) {
            return Err(self.err(
                ErrorKind::Unreachable,
                "discover",
                format!(
                    "{} list failed ({}): {}",
                    self.agent,
                    run.code_str(),
                    run.said()
                ),
                false,
            ));
        }
        Ok(run
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("NOTICE:") && !l.contains("ERROR"))
            .map(|l| {
                let (plug, alias) = l.split_once(',').unwrap_or((l, ""));
                Discovered {
                    capability: POWER_OFF.into(),
                    resource: plug.trim().to_owned(),
                    description: if alias.trim().is_empty() {
                        format!("plug {}", plug.trim())
                    } else {
                        format!("plug {} ({})", plug.trim(), alias.trim())
                    },
                }
            })
            .collect())
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        let call = "power.off check-binding";
        if let Err(e) = self.check_capability(call, target) {
            return Ok(vec![e.message]);
        }
        let md = self.metadata(ctx).await?;
        let mut problems = Vec::new();
        for a in ["off", "status"] {
            if !md.actions.contains(a) {
                problems.push(format!("{} has no {a} action", self.agent));
            }
        }
        if md.actions.contains("list") {
            let plugs = self.discover(ctx).await?;
            if !plugs.is_empty() && !plugs.iter().any(|d| d.resource == target.resource) {
                problems.push(format!(
                    "plug {:?} is not listed by {} (it lists {})",
                    target.resource,
                    self.agent,
                    plugs
                        .iter()
                        .map(|d| d.resource.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if problems.is_empty()
            && let Err(e) = self.status(ctx, call, &target.resource).await
        {
            problems.push(e.message);
        }
        Ok(problems)
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.off check";
        self.check_capability(call, target)?;
        let (off, detail) = self.status(ctx, call, &target.resource).await?;
        Ok(ctx.reading(off, detail))
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let call = "power.off";
        self.check_capability(call, target)?;
        // Already off is success, and needs no action.
        if let Ok((true, detail)) = self.status(ctx, call, &target.resource).await {
            return Ok(ctx.reading(true, format!("{detail} (already off)")));
        }
        let r = self.act(ctx, call, target, "off", true).await?;
        tracing::info!(controller = %self.id, resource = %target.resource, "Fence verified by read-back: {}", r.detail);
        Ok(r)
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        self.act(ctx, "power.on", target, "on", false).await
    }
}
