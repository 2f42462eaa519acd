//! Reading the cluster's identity and grading every capability from the token's
//! privileges, without side effects.

use super::*;

impl Inner {
    pub(super) async fn cluster(
        &self,
    ) -> Result<(Option<String>, bool, Vec<(String, bool)>, Option<String>), DriverError> {
        let a = self.call(Method::GET, "cluster/status", &[], &[]).await?;
        let mut name = None;
        let mut quorate = true;
        let mut nodes = Vec::new();
        for e in a.data.as_array().into_iter().flatten() {
            match e.get("type").and_then(Value::as_str) {
                Some("cluster") => {
                    name = e.get("name").and_then(Value::as_str).map(str::to_owned);
                    quorate = e.get("quorate").and_then(loose_u64) == Some(1);
                }
                Some("node") => {
                    let n = e
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned();
                    nodes.push((n, e.get("online").and_then(loose_u64) == Some(1)));
                }
                _ => {}
            }
        }
        Ok((name, quorate, nodes, a.fingerprint))
    }

    /// Who the credential is, for `/access/permissions?userid=`.
    pub(super) fn auth_id(&self) -> String {
        match &self.auth {
            ProxmoxAuth::Token { token_id } => token_id.clone(),
            ProxmoxAuth::Ticket { username } => username.clone(),
        }
    }

    pub(super) async fn grades(&self) -> Result<(Vec<CapabilityGrade>, Vec<String>), DriverError> {
        let mut warnings = Vec::new();
        // Asked as the credential itself: PVE's own answer, privsep intersection included.
        let own = match self.get("access/permissions", &[]).await {
            Ok(v) => v,
            Err(e) if e.kind == ErrorKind::Rejected => {
                let g = |c: &str| CapabilityGrade {
                    capability: c.to_owned(),
                    grade: Grade::Unverifiable,
                    reason: format!("the permission dump failed: {}", e.message),
                };
                return Ok((
                    [STOP, START, STATUS, LAG].into_iter().map(g).collect(),
                    warnings,
                ));
            }
            Err(e) => return Err(e),
        };
        // For a token: what its user holds, to point at privilege separation.
        let user = match &self.auth {
            ProxmoxAuth::Token { token_id } => {
                let user = token_id.split('!').next().unwrap_or(token_id);
                self.get("access/permissions", &[("userid", user)])
                    .await
                    .ok()
            }
            ProxmoxAuth::Ticket { .. } => None,
        };
        let mut grades = Vec::new();
        for (cap, privilege) in [
            (STOP, "VM.PowerMgmt"),
            (START, "VM.PowerMgmt"),
            (STATUS, "VM.Audit"),
            (LAG, "VM.Audit"),
        ] {
            let everywhere = privileges_on(&own, "/vms").iter().any(|p| p == privilege);
            let some: Vec<String> = own
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(p, privs)| p.starts_with("/vms/") && privs.get(privilege).is_some())
                .map(|(p, _)| p.trim_start_matches("/vms/").to_owned())
                .collect();
            let who = self.auth_id();
            let g = if everywhere {
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Proven,
                    reason: format!(
                        "/access/permissions as {who}: {privilege} on /vms, propagated"
                    ),
                }
            } else if !some.is_empty() {
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Inferred,
                    reason: format!(
                        "/access/permissions as {who}: {privilege} only on VMs {}; other VMs lack it",
                        some.join(", ")
                    ),
                }
            } else {
                let user_has = user
                    .as_ref()
                    .is_some_and(|u| privileges_on(u, "/vms").iter().any(|p| p == privilege));
                let why = if user_has {
                    " (its user has it: the token has privilege separation and needs its own ACL)"
                } else {
                    ""
                };
                CapabilityGrade {
                    capability: cap.to_owned(),
                    grade: Grade::Failed,
                    reason: format!("/access/permissions as {who}: no {privilege} on any VM{why}"),
                }
            };
            grades.push(g);
        }
        if !privileges_on(&own, "/").iter().any(|p| p == "Sys.Audit") {
            warnings.push("no Sys.Audit on /: cluster status and quorum cannot be read".to_owned());
        }
        if matches!(self.auth, ProxmoxAuth::Token { .. }) {
            warnings.push(
                "API tokens cannot use skiplock: a VM with a config lock may refuse vm.stop"
                    .to_owned(),
            );
        }
        Ok((grades, warnings))
    }
}
