//! Grading every capability from the API administrator's access profile, without
//! writing.

use super::*;

impl FortigateDriver {
    pub(super) async fn grade(&self) -> Result<(Vec<CapabilityGrade>, Vec<String>), DriverError> {
        let mut warnings = Vec::new();
        let grade = |capability: &str, grade: Grade, reason: String| CapabilityGrade {
            capability: capability.to_owned(),
            grade,
            reason,
        };
        let mut readable = BTreeMap::new();
        for (cap, table) in [(POLICY_DISABLE, "policy"), (VIP_OWN, "vip")] {
            let a = self
                .send(Method::GET, &format!("api/v2/cmdb/firewall/{table}"), None)
                .await?;
            if a.status == StatusCode::UNAUTHORIZED {
                return Err(self.err(ErrorKind::Auth, "probe", "API key refused (401)", false));
            }
            readable.insert(cap, a.status.is_success());
        }
        // Who may write firewall objects: only visible to keys that read system objects.
        let write = self.firewall_write_grants().await?;
        let mut grades = Vec::new();
        for cap in [POLICY_DISABLE, VIP_OWN] {
            let what = if cap == POLICY_DISABLE {
                "firewall policies"
            } else {
                "VIPs"
            };
            let g = if !readable[cap] {
                grade(
                    cap,
                    Grade::Failed,
                    format!("the key cannot read {what} in vdom {}", self.vdom),
                )
            } else {
                match write {
                    WriteGrants::All => grade(
                        cap,
                        Grade::Inferred,
                        format!(
                            "every API user of vdom {} has firewall read-write; FortiOS cannot \
                             say which one this key is",
                            self.vdom
                        ),
                    ),
                    WriteGrants::None => grade(
                        cap,
                        Grade::Failed,
                        format!("no API user of vdom {} may write {what}", self.vdom),
                    ),
                    WriteGrants::Some => grade(
                        cap,
                        Grade::Unverifiable,
                        "some API users may write firewall objects and some may not; FortiOS \
                         cannot say which one this key is"
                            .to_owned(),
                    ),
                    WriteGrants::Hidden => grade(
                        cap,
                        Grade::Unverifiable,
                        format!(
                            "the key reads {what} but not its own access profile (403); the \
                             first real use is the proof"
                        ),
                    ),
                }
            };
            grades.push(g);
        }
        match self.session_dirty().await? {
            Some(s) if s == "check-new" => warnings.push(format!(
                "vdom {}: firewall-session-dirty=check-new keeps established sessions when a \
                 policy is disabled, so policy.disable cannot complete a fence",
                self.vdom
            )),
            None => warnings.push(format!(
                "vdom {}: the key cannot read system settings; firewall-session-dirty is \
                 assumed to be the default check-all",
                self.vdom
            )),
            Some(_) => {}
        }
        if let Some(w) = &self.client().await?.warning {
            warnings.push(w.clone());
        }
        Ok((grades, warnings))
    }

    pub(super) async fn firewall_write_grants(&self) -> Result<WriteGrants, DriverError> {
        let users = self
            .send(Method::GET, "api/v2/cmdb/system/api-user", None)
            .await?;
        let profiles = self
            .send(Method::GET, "api/v2/cmdb/system/accprofile", None)
            .await?;
        if !users.status.is_success() || !profiles.status.is_success() {
            return Ok(WriteGrants::Hidden);
        }
        let list = |v: &Value| {
            v.get("results")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let writes: BTreeMap<String, bool> = list(&profiles.body)
            .iter()
            .filter_map(|p| {
                let name = p.get("name")?.as_str()?.to_owned();
                let fw = p.get("fwgrp").and_then(Value::as_str).unwrap_or("none");
                let custom_policy = p
                    .pointer("/fwgrp-permission/policy")
                    .and_then(Value::as_str)
                    .unwrap_or("none");
                Some((
                    name,
                    fw == "read-write" || (fw == "custom" && custom_policy == "read-write"),
                ))
            })
            .collect();
        let mut yes = 0;
        let mut no = 0;
        for u in list(&users.body) {
            let in_vdom = u.get("vdom").and_then(Value::as_array).is_some_and(|v| {
                v.iter()
                    .any(|d| d.get("name").and_then(Value::as_str) == Some(&self.vdom))
            });
            if !in_vdom {
                continue;
            }
            let prof = u.get("accprofile").and_then(Value::as_str).unwrap_or("");
            if writes.get(prof).copied().unwrap_or(false) {
                yes += 1;
            } else {
                no += 1;
            }
        }
        Ok(match (yes, no) {
            (0, 0) => WriteGrants::Hidden,
            (_, 0) => WriteGrants::All,
            (0, _) => WriteGrants::None,
            _ => WriteGrants::Some,
        })
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum WriteGrants {
    All,
    None,
    Some,
    Hidden,
}
