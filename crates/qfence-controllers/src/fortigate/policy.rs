//! `policy.disable`: reading and setting a firewall policy's status.

use super::*;

impl FortigateDriver {
    pub(super) fn policy_id(&self, target: &Target) -> Result<u32, DriverError> {
        target.resource.parse().map_err(|_| {
            self.err(
                ErrorKind::Rejected,
                &target.capability,
                format!(
                    "{:?} is not a firewall policy id (a number)",
                    target.resource
                ),
                false,
            )
        })
    }

    /// Reads the policy fence: disabled, and established sessions re-checked.
    pub(super) async fn read_policy(
        &self,
        ctx: &CallContext,
        id: u32,
    ) -> Result<Reading, DriverError> {
        let r = self.read_policy_here(ctx, id).await?;
        self.with_ha(r).await
    }

    /// Reads the policy on the unit that answers.
    pub(super) async fn read_policy_here(
        &self,
        ctx: &CallContext,
        id: u32,
    ) -> Result<Reading, DriverError> {
        let p = self.get_object("policy", &id.to_string()).await?;
        let status = p.get("status").and_then(Value::as_str).unwrap_or("enable");
        if p.get("action").and_then(Value::as_str) == Some("deny") {
            return Ok(ctx.reading(
                false,
                format!(
                    "policy {id} is a deny policy (status={status}): disabling it fences nothing"
                ),
            ));
        }
        if status != "disable" {
            return Ok(ctx.reading(false, format!("policy {id} status={status}")));
        }
        let (dirty, how) = match self.session_dirty().await? {
            Some(s) if s == "check-policy-option" => (
                p.get("firewall-session-dirty")
                    .and_then(Value::as_str)
                    .unwrap_or("check-all")
                    .to_owned(),
                "policy option",
            ),
            Some(s) => (s, "system settings"),
            None => (
                "check-all".to_owned(),
                "assumed default: system settings unreadable",
            ),
        };
        if dirty == "check-new" {
            return Ok(ctx.reading(
                false,
                format!(
                    "policy {id} status=disable but firewall-session-dirty=check-new ({how}): \
                     established sessions are kept until cleared"
                ),
            ));
        }
        Ok(ctx.reading(
            true,
            format!("policy {id} status=disable, firewall-session-dirty={dirty} ({how})"),
        ))
    }

    pub(super) async fn set_policy(
        &self,
        ctx: &CallContext,
        target: &Target,
        enable: bool,
    ) -> Result<Reading, DriverError> {
        let id = self.policy_id(target)?;
        let want = if enable { "enable" } else { "disable" };
        let current = self.get_object("policy", &id.to_string()).await?;
        if !enable && current.get("action").and_then(Value::as_str) == Some("deny") {
            return Err(self.err(
                ErrorKind::Rejected,
                POLICY_DISABLE,
                format!(
                    "policy {id} denies traffic: disabling it would let traffic through, not fence"
                ),
                false,
            ));
        }
        if current.get("status").and_then(Value::as_str) != Some(want) {
            let path = format!("api/v2/cmdb/firewall/policy/{id}");
            self.ok(Method::PUT, &path, Some(&json!({ "status": want })))
                .await?;
        }
        // Also when the change was already made (by an earlier attempt): peers must have it.
        self.wait_ha_sync().await?;
        if enable {
            let p = self.get_object("policy", &id.to_string()).await?;
            let status = p.get("status").and_then(Value::as_str).unwrap_or("enable");
            let r = ctx.reading(status == "enable", format!("policy {id} status={status}"));
            self.with_ha(r).await
        } else {
            self.read_policy(ctx, id).await
        }
    }
}
