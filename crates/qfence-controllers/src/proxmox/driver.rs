//! The [`Driver`] and [`Build`] contracts over the client: VM power, followed by its task
//! and proven by a read-back, and the checks.

use super::*;

/// Builds the driver. No I/O. The secret is the token's UUID (token auth) or the password
/// (ticket auth).
impl Build for ProxmoxDriver {
    const TYPE: ControllerType = ControllerType::Proxmox;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Proxmox { endpoint, auth } = &config.kind else {
            return Err(DriverError::wrong_type(&id, config, Self::TYPE));
        };
        let secret = required_secret(&id, Self::TYPE, secret)?;
        // Accept `https://host:8006` and `https://host:8006/api2/json`.
        let mut base = endpoint.clone();
        let path = base
            .path()
            .trim_end_matches('/')
            .trim_end_matches("/api2/json")
            .to_owned();
        base.set_path(&format!("{path}/api2/json/"));
        Ok(ProxmoxDriver(Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            id,
            base,
            auth: auth.clone(),
            secret,
            trust: config.tls.clone(),
            client: OnceCell::new(),
            ticket: tokio::sync::Mutex::new(None),
            replication: Mutex::new(HashMap::new()),
            guests: Arc::default(),
            vm_lists: Mutex::new(HashMap::new()),
            job_lists: Mutex::new(HashMap::new()),
        })))
    }
}

impl Inner {
    pub(super) fn vm(&self, target: &Target) -> Result<(String, u32), DriverError> {
        parse_node_vmid(&target.resource)
            .map(|(n, v)| (n.to_owned(), v))
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Rejected,
                    &target.capability,
                    format!("{:?} is not node/vmid", target.resource),
                    false,
                )
            })
    }

    /// `status/current` of the VM on its node: (status, qmpstatus, HA-managed, words).
    pub(super) async fn vm_status(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<(String, String, bool, String), DriverError> {
        let d = self
            .get(&format!("nodes/{node}/qemu/{vmid}/status/current"), &[])
            .await?;
        let status = d
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        let qmp = d
            .get("qmpstatus")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ha = d.pointer("/ha/managed").and_then(loose_u64).unwrap_or(0) == 1;
        let lock = d.get("lock").and_then(Value::as_str);
        let mut words = vm_words(node, vmid, &status, &qmp, lock);
        if ha {
            let st = d
                .pointer("/ha/state")
                .and_then(Value::as_str)
                .unwrap_or("?");
            words.push_str(&format!(" (HA-managed, ha state {st})"));
        }
        Ok((status, qmp, ha, words))
    }

    /// Follows a task to its end: `Ok(None)` for OK or warnings, `Ok(Some(exitstatus))` for an
    /// error the task reported.
    pub(super) async fn follow(&self, upid: &str) -> Result<Option<String>, DriverError> {
        let node = upid
            .split(':')
            .nth(1)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Protocol,
                    "task",
                    format!("not a UPID: {upid}"),
                    true,
                )
            })?;
        let path = format!("nodes/{node}/tasks/{}/status", encode(upid));
        // Quick polls catch a quick task (a stop, a start) early; a long one is asked less
        // often, so many tasks followed at once do not flood the API.
        let started = tokio::time::Instant::now();
        loop {
            let d = self.get(&path, &[]).await.map_err(|mut e| {
                // The action was sent: whatever happens now, its effect is unknown.
                e.state_unknown = true;
                e
            })?;
            if d.get("status").and_then(Value::as_str) == Some("stopped") {
                let exit = d
                    .get("exitstatus")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                return Ok((exit != "OK" && !exit.starts_with("WARNINGS")).then_some(exit));
            }
            let pause = if started.elapsed() < Duration::from_secs(1) {
                POLL
            } else {
                SLOW_POLL
            };
            tokio::time::sleep(pause).await;
        }
    }

    /// Stops (`want = "stopped"`) or starts (`"running"`) a VM and reads it back until it is so.
    pub(super) async fn power(
        &self,
        ctx: &CallContext,
        target: &Target,
        want: &str,
    ) -> Result<Reading, DriverError> {
        let (node, vmid) = self.vm(target)?;
        let (status, _, ha, words) = self.vm_status(&node, vmid).await?;
        if status == want {
            return Ok(ctx.reading(true, words));
        }
        let action = if want == "stopped" { "stop" } else { "start" };
        // overrule-shutdown aborts a pending shutdown task; PVE rejects it for HA resources.
        let form: &[(&str, &str)] = if action == "stop" && !ha {
            &[("overrule-shutdown", "1")]
        } else {
            &[]
        };
        let upid = self
            .call(
                Method::POST,
                &format!("nodes/{node}/qemu/{vmid}/status/{action}"),
                &[],
                form,
            )
            .await?
            .data;
        let upid = upid.as_str().ok_or_else(|| {
            self.err(
                ErrorKind::Protocol,
                action,
                format!("answer is not a UPID: {upid}"),
                true,
            )
        })?;
        let task_error = self.follow(upid).await?;
        // The task's end is not the proof (an HA request ends when queued): read the VM.
        loop {
            let (status, _, ha, words) = self.vm_status(&node, vmid).await.map_err(|mut e| {
                e.state_unknown = true;
                e
            })?;
            if status == want {
                let via = if ha {
                    "; through the HA stack (requested state now stopped or started)"
                } else {
                    ""
                };
                return Ok(ctx.reading(true, format!("{words}{via}")));
            }
            if let Some(exit) = &task_error {
                return Ok(ctx.reading(false, format!("{words}; the {action} task failed: {exit}")));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Inner {
    pub(super) async fn read_vm(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let (node, vmid) = self.vm(target)?;
        let listed = self.listed_vm(&node, vmid).await?.and_then(|row| {
            let status = row.status?;
            let qmp = row.qmpstatus;
            // Whether a running VM is paused needs qmpstatus; without it, ask the VM.
            if target.capability == STATUS && status == "running" && qmp.is_none() {
                return None;
            }
            let qmp = qmp.unwrap_or_default();
            let words = vm_words(&node, vmid, &status, &qmp, row.lock.as_deref());
            Some((status, qmp, words))
        });
        // Not listed (missing, or not visible to this token): `status/current` says which.
        let (status, qmp, words) = match listed {
            Some(found) => found,
            None => {
                let (status, qmp, _, words) = self.vm_status(&node, vmid).await?;
                (status, qmp, words)
            }
        };
        let holds = match target.capability.as_str() {
            STOP => status == "stopped",
            START => status == "running",
            // A paused VM runs no service.
            _ => status == "running" && (qmp.is_empty() || qmp == "running"),
        };
        Ok(ctx.reading(holds, words))
    }
}

impl Driver for ProxmoxDriver {
    fn controller_type(&self) -> ControllerType {
        Self::TYPE
    }

    fn id(&self) -> &ControllerId {
        &self.id
    }

    async fn probe(&self, ctx: &CallContext) -> Result<Probe, DriverError> {
        ctx.run(&self.id, "probe", async {
            let version = self.get("version", &[]).await?;
            let (name, quorate, nodes, fingerprint) = self.cluster().await?;
            let mut facts = BTreeMap::new();
            if let Some(v) = version.get("version").and_then(Value::as_str) {
                facts.insert("version".to_owned(), v.to_owned());
            }
            facts.insert("quorate".to_owned(), quorate.to_string());
            for (n, online) in &nodes {
                facts.insert(
                    format!("node.{n}"),
                    if *online { "online" } else { "offline" }.to_owned(),
                );
            }
            let (grades, mut warnings) = self.grades().await?;
            if !quorate {
                warnings.push(
                    "the answering node has no quorum: PVE refuses VM actions there".to_owned(),
                );
            }
            for (n, online) in &nodes {
                if !online {
                    warnings.push(format!("node {n} is offline"));
                }
            }
            let id = match name {
                Some(n) => n,
                None => {
                    let local = nodes.first().map_or("?", |(n, _)| n.as_str());
                    warnings
                        .push("not a cluster: identity is the standalone node's name".to_owned());
                    format!("standalone:{local}")
                }
            };
            if let Some(w) = &self.client().await?.warning {
                warnings.push(w.clone());
            }
            Ok(Probe {
                identity: Identity {
                    id,
                    facts,
                    tls_fingerprint: fingerprint,
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
            let vms = self.get("cluster/resources", &[("type", "vm")]).await?;
            for v in vms.as_array().into_iter().flatten() {
                if v.get("type").and_then(Value::as_str) != Some("qemu")
                    || v.get("template").and_then(loose_u64) == Some(1)
                {
                    continue;
                }
                let (Some(node), Some(vmid)) = (
                    v.get("node").and_then(Value::as_str),
                    v.get("vmid").and_then(loose_u64),
                ) else {
                    continue;
                };
                let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
                let status = v.get("status").and_then(Value::as_str).unwrap_or("unknown");
                let ha = v
                    .get("hastate")
                    .and_then(Value::as_str)
                    .map(|h| format!(", HA {h}"))
                    .unwrap_or_default();
                let description = format!("VM {vmid} {name:?} on {node}, {status}{ha}");
                for cap in [STOP, START, STATUS] {
                    out.push(Discovered {
                        capability: cap.to_owned(),
                        resource: format!("{node}/{vmid}"),
                        description: description.clone(),
                    });
                }
            }
            let jobs = self.get("cluster/replication", &[]).await?;
            for j in jobs.as_array().into_iter().flatten() {
                let Some(id) = j.get("id").and_then(Value::as_str) else {
                    continue;
                };
                let target = j.get("target").and_then(Value::as_str).unwrap_or("?");
                let schedule = j.get("schedule").and_then(Value::as_str).unwrap_or("*/15");
                out.push(Discovered {
                    capability: LAG.to_owned(),
                    resource: id.to_owned(),
                    description: format!("replication job {id} to {target}, schedule {schedule}"),
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
            let (_, quorate, nodes, _) = self.cluster().await?;
            if !quorate {
                problems.push("the answering node has no quorum".to_owned());
            }
            match target.capability.as_str() {
                STOP | START | STATUS => {
                    let Some((node, vmid)) = parse_node_vmid(&target.resource) else {
                        problems.push(format!("{:?} is not node/vmid", target.resource));
                        return Ok(problems);
                    };
                    match nodes.iter().find(|(n, _)| n == node) {
                        None => problems.push(format!("node {node} is not in the cluster")),
                        Some((_, false)) => problems.push(format!("node {node} is offline")),
                        Some(_) => {}
                    }
                    // A binding check wants where the guest is now, not where it was.
                    match self.guest_node(&vmid.to_string(), true).await?.map(|(n, _)| n) {
                        None => problems.push(format!(
                            "VM {vmid} is not visible (it does not exist, or the credential lacks VM.Audit on it)"
                        )),
                        Some(n) if n != node => problems.push(format!("VM {vmid} is on node {n}, not {node}")),
                        Some(_) => {}
                    }
                    // The credential's own privileges on this VM, as PVE computes them.
                    let need = if target.capability == STATUS { "VM.Audit" } else { "VM.PowerMgmt" };
                    let path = format!("/vms/{vmid}");
                    match self.get("access/permissions", &[("path", &path)]).await {
                        Ok(perms) if !privileges_on(&perms, &path).iter().any(|p| p == need) => {
                            problems.push(format!("{} lacks {need} on {path}", self.auth_id()));
                        }
                        Ok(_) => {}
                        Err(e) if e.kind == ErrorKind::Rejected => {
                            problems.push(format!("cannot read own permissions on {path}: {}", e.message));
                        }
                        Err(e) => return Err(e),
                    }
                }
                LAG => {
                    let jobs = self.get("cluster/replication", &[]).await?;
                    let known = jobs
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|j| j.get("id").and_then(Value::as_str) == Some(&target.resource));
                    if !known {
                        problems.push(format!("replication job {} does not exist (or is not visible)", target.resource));
                    }
                    for k in ["max_age_seconds", "max_fail_count"] {
                        if let Some(v) = target.param(ControllerType::Proxmox, k)
                            && v.parse::<u64>().is_err()
                        {
                            problems.push(format!("params.{k}: {v:?} is not a whole number"));
                        }
                    }
                }
                _ => return Err(unsupported(self, "the capability", target)),
            }
            Ok(problems)
        })
        .await
    }

    async fn check(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "check", async {
            match target.capability.as_str() {
                STOP | START | STATUS => self.read_vm(ctx, target).await,
                LAG => self.read_replication(ctx, target).await,
                _ => Err(unsupported(self, "the capability", target)),
            }
        })
        .await
    }

    async fn perform(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "perform", async {
            match target.capability.as_str() {
                STOP => self.power(ctx, target, "stopped").await,
                START => self.power(ctx, target, "running").await,
                _ => Err(unsupported(self, "perform", target)),
            }
        })
        .await
    }

    async fn undo(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        ctx.run(&self.id, "undo", async {
            match target.capability.as_str() {
                // The reading is of the fence's condition, which no longer holds once the
                // start is proven (contract §3.7).
                STOP => self
                    .power(ctx, target, "running")
                    .await
                    .map(crate::driver::Reading::negated),
                _ => Err(unsupported(self, "undo", target)),
            }
        })
        .await
    }

    /// All at once, so that the checks of one node share its listing in flight (one request
    /// for them all) rather than each waiting for a listing sent after it began.
    async fn check_many(
        &self,
        ctx: &CallContext,
        targets: &[Target],
    ) -> Vec<Result<Reading, DriverError>> {
        futures_util::future::join_all(targets.iter().map(|t| self.check(ctx, t))).await
    }

    fn reads_in_bulk(&self, capability: &str) -> bool {
        reads_in_bulk(capability)
    }

    /// Forgets the login ticket (Proxmox VE has no call that revokes one; it expires two
    /// hours after it was made). An API token is not a session: nothing to end.
    async fn close(&self) {
        self.ticket.lock().await.take();
    }
}
