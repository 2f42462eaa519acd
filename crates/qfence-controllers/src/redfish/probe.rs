//! Grading the fence capability from the account's role and privileges, without fencing.

use super::*;

impl RedfishDriver {
    /// The role the account has and whether it grants ConfigureComponents.
    pub(super) async fn grade_fence(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        systems: &[System],
    ) -> CapabilityGrade {
        let grade = |grade, reason: String| CapabilityGrade {
            capability: POWER_OFF.to_owned(),
            grade,
            reason,
        };
        if systems.is_empty() {
            return grade(Grade::Failed, "the service lists no systems".into());
        }
        let no_force: Vec<&str> = systems
            .iter()
            .filter(|s| !s.allows("ForceOff") || s.reset_target.is_none())
            .map(|s| s.id.as_str())
            .collect();
        if no_force.len() == systems.len() {
            return grade(
                Grade::Failed,
                format!(
                    "no system advertises a Reset action allowing ForceOff ({})",
                    no_force.join(", ")
                ),
            );
        }
        let role = self.own_role(ctx, auth).await;
        let caveat = if no_force.is_empty() {
            String::new()
        } else {
            format!("; systems {} cannot be forced off", no_force.join(", "))
        };
        let needed = self.post_privileges(ctx, auth).await;
        match role {
            Ok((role, privs)) if !privs.is_empty() => {
                let holds = |set: &Vec<String>| set.iter().all(|p| privs.contains(p));
                let show = |sets: &[Vec<String>]| {
                    sets.iter()
                        .map(|s| s.join("+"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                };
                match needed {
                    Some(sets) if sets.iter().any(holds) => grade(
                        Grade::Proven,
                        format!(
                            "ForceOff is advertised, the service's own privilege map says resetting \
                             a system needs {}, and role {role} holds it{caveat}",
                            show(&sets)
                        ),
                    ),
                    Some(sets) => grade(
                        Grade::Failed,
                        format!(
                            "the service's privilege map says resetting a system needs {}; role \
                             {role} has {}",
                            show(&sets),
                            privs.join(", ")
                        ),
                    ),
                    None if privs.iter().any(|p| p == "ConfigureComponents") => grade(
                        Grade::Inferred,
                        format!(
                            "ForceOff is advertised and role {role} grants ConfigureComponents, \
                             which the DMTF default privilege map requires to reset a system \
                             (the service publishes no map of its own){caveat}"
                        ),
                    ),
                    None => grade(
                        Grade::Failed,
                        format!(
                            "role {role} lacks ConfigureComponents (it has {}), so resets will be refused",
                            privs.join(", ")
                        ),
                    ),
                }
            }
            Ok((role, _)) => grade(
                Grade::Unverifiable,
                format!("role {role} shows no privileges; the first fence is the proof{caveat}"),
            ),
            Err(why) => grade(
                Grade::Unverifiable,
                format!(
                    "ForceOff is advertised, but the service does not show this account's role \
                     ({why}); the first fence is the proof{caveat}"
                ),
            ),
        }
    }

    /// The privilege sets the service's own `PrivilegeMap` requires to POST to a
    /// `ComputerSystem` (any one set suffices). `None` when it publishes no map.
    pub(super) async fn post_privileges(
        &self,
        ctx: &CallContext,
        auth: &Auth,
    ) -> Option<Vec<Vec<String>>> {
        let account = self
            .get(ctx, auth, "/redfish/v1/AccountService")
            .await
            .ok()?;
        let map_uri = account
            .pointer("/PrivilegeMap/@odata.id")?
            .as_str()?
            .to_owned();
        let map = self.get(ctx, auth, &map_uri).await.ok()?;
        let entry = map
            .get("Mappings")?
            .as_array()?
            .iter()
            .find(|m| m.get("Entity").and_then(Value::as_str) == Some("ComputerSystem"))?;
        let sets: Vec<Vec<String>> = entry
            .pointer("/OperationMap/POST")?
            .as_array()?
            .iter()
            .filter_map(|p| {
                p.get("Privilege")?.as_array().map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
            })
            .collect();
        (!sets.is_empty()).then_some(sets)
    }

    pub(super) async fn own_role(
        &self,
        ctx: &CallContext,
        auth: &Auth,
    ) -> Result<(String, Vec<String>), String> {
        let accounts = self
            .get(ctx, auth, "/redfish/v1/AccountService/Accounts")
            .await
            .map_err(|e| e.message)?;
        let mut role_id = None;
        for m in accounts
            .get("Members")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(64)
        {
            let Some(uri) = m.get("@odata.id").and_then(Value::as_str) else {
                continue;
            };
            let Ok(acc) = self.get(ctx, auth, uri).await else {
                continue;
            };
            if acc.get("UserName").and_then(Value::as_str) == Some(self.username.as_str()) {
                role_id = acc.get("RoleId").and_then(Value::as_str).map(str::to_owned);
                break;
            }
        }
        let role = role_id.ok_or("its account is not visible")?;
        let privs = match self
            .get(
                ctx,
                auth,
                &format!("/redfish/v1/AccountService/Roles/{role}"),
            )
            .await
        {
            Ok(r) => r
                .get("AssignedPrivileges")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            // The standard roles' privileges are fixed by the specification.
            Err(_) => match role.as_str() {
                "Administrator" | "Operator" => vec!["Login".into(), "ConfigureComponents".into()],
                "ReadOnly" => vec!["Login".into(), "ConfigureSelf".into()],
                _ => vec![],
            },
        };
        Ok((role, privs))
    }
}
