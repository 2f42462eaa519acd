//! The [`Driver`] and [`Build`] contracts over the client.

use super::*;

/// Builds the driver from its configuration and API key. No I/O.
impl Build for FortigateDriver {
    const TYPE: ControllerType = ControllerType::Fortigate;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Fortigate { endpoint, vdom } = &config.kind else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let key = required_secret(&id, Self::TYPE, secret)?;
        Ok(FortigateDriver {
            id,
            base: endpoint.clone(),
            vdom: vdom.clone().unwrap_or_else(|| "root".to_owned()),
            trust: config.tls.clone(),
            key,
            client: OnceCell::new(),
            ha: Default::default(),
        })
    }
}

impl Driver for FortigateDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", async {
            let a = self
                .ok(Method::GET, "api/v2/monitor/system/status", None)
                .await?;
            let serial = a
                .body
                .get("serial")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    self.err(
                        ErrorKind::Protocol,
                        "probe",
                        "system status has no serial",
                        false,
                    )
                })?
                .to_owned();
            let mut facts = BTreeMap::new();
            for (k, v) in [
                ("version", a.body.get("version")),
                ("build", a.body.get("build")),
                ("hostname", a.body.pointer("/results/hostname")),
                ("model", a.body.pointer("/results/model_name")),
            ] {
                if let Some(v) = v {
                    facts.insert(
                        k.to_owned(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    );
                }
            }
            facts.insert("vdom".to_owned(), self.vdom.clone());
            let (grades, warnings) = self.grade().await?;
            Ok(Probe {
                identity: Identity {
                    id: serial,
                    facts,
                    tls_fingerprint: a.fingerprint,
                },
                grades,
                warnings,
            })
        })
        .await
    }

    async fn discover(&self, ctx: &CallContext) -> Result<Vec<Discovered>, DriverError> {
        ctx.run(&self.id, "discover", async {
            let mut out = Vec::new();
            let policies = self
                .ok(Method::GET, "api/v2/cmdb/firewall/policy", None)
                .await?;
            for p in policies
                .body
                .get("results")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(id) = p.get("policyid").and_then(Value::as_u64) else {
                    continue;
                };
                let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("?").to_owned();
                out.push(Discovered {
                    capability: POLICY_DISABLE.to_owned(),
                    resource: id.to_string(),
                    description: format!(
                        "policy {id} {:?} ({}, {})",
                        s("name"),
                        s("action"),
                        s("status")
                    ),
                });
            }
            let vips = self
                .ok(Method::GET, "api/v2/cmdb/firewall/vip", None)
                .await?;
            for v in vips
                .body
                .get("results")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(name) = v.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let ext = v.get("extip").and_then(Value::as_str).unwrap_or("?");
                out.push(Discovered {
                    capability: VIP_OWN.to_owned(),
                    resource: name.to_owned(),
                    description: format!(
                        "VIP {name:?} {ext} -> {} ({})",
                        mapped_ips(v).join(","),
                        v.get("status").and_then(Value::as_str).unwrap_or("enable")
                    ),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn check_binding(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Vec<String>, DriverError> {
        ctx.run(&self.id, "check_binding", async {
            let mut problems = Vec::new();
            let (table, what) = match target.capability.as_str() {
                POLICY_DISABLE => {
                    if target.resource.parse::<u32>().is_err() {
                        problems.push(format!("{:?} is not a firewall policy id", target.resource));
                        return Ok(problems);
                    }
                    ("policy", "firewall policy")
                }
                VIP_OWN => {
                    if !target.params.contains_key(target.site.as_str()) {
                        problems.push(format!("params give no address for site {}", target.site));
                    }
                    for (site, addr) in &target.params {
                        if !valid_address(addr) {
                            problems.push(format!(
                                "params.{site}: {addr:?} is not an IP address or range"
                            ));
                        }
                    }
                    ("vip", "virtual IP")
                }
                _ => return Err(unsupported(self, "the capability", target)),
            };
            let path = format!("api/v2/cmdb/firewall/{table}/{}", encode(&target.resource));
            let a = self.send(Method::GET, &path, None).await?;
            if a.status == StatusCode::NOT_FOUND {
                problems.push(format!(
                    "{what} {} does not exist in vdom {}",
                    target.resource, self.vdom
                ));
            } else {
                let a = self.ok(Method::GET, &path, None).await?;
                let action = first_result(&a.body)
                    .and_then(|p| p.get("action").and_then(Value::as_str).map(str::to_owned));
                if table == "policy" && action.as_deref() == Some("deny") {
                    problems.push(format!(
                        "policy {} denies traffic: disabling it would let traffic through",
                        target.resource
                    ));
                }
            }
            Ok(problems)
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", async {
            match target.capability.as_str() {
                POLICY_DISABLE => self.read_policy(ctx, self.policy_id(target)?).await,
                VIP_OWN => self.read_vip(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                POLICY_DISABLE => self.set_policy(ctx, target, false).await,
                VIP_OWN => self.own_vip(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "undo", async {
            match target.capability.as_str() {
                // The reading is of the fence's condition, which no longer holds once the
                // enable is proven (contract §3.7).
                POLICY_DISABLE => self
                    .set_policy(ctx, target, true)
                    .await
                    .map(crate::driver::Reading::negated),
                // A VIP is moved by the next owner's vip.own, never "un-owned".
                _ => Err(unsupported(self, "undo", target)),
            }
        })
        .await
    }
}
