//! `vip.own`: reading and setting the address a virtual IP maps to.

use super::*;

impl FortigateDriver {
    /// The address the VIP must map to for the target's site.
    pub(super) fn vip_address<'a>(&self, target: &'a Target) -> Result<&'a str, DriverError> {
        let addr = target
            .param(ControllerType::Fortigate, target.site.as_str())
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Rejected,
                    VIP_OWN,
                    format!(
                        "binding gives no address for site {} (params: one address per site)",
                        target.site
                    ),
                    false,
                )
            })?;
        Ok(addr)
    }

    pub(super) async fn read_vip(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let r = self.read_vip_here(ctx, target).await?;
        self.with_ha(r).await
    }

    pub(super) async fn read_vip_here(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let want = self.vip_address(target)?;
        let v = self.get_object("vip", &target.resource).await?;
        let mapped = mapped_ips(&v);
        let status = v.get("status").and_then(Value::as_str).unwrap_or("enable");
        let holds = status == "enable" && mapped == [want];
        Ok(ctx.reading(
            holds,
            format!(
                "VIP {} status={status} mappedip={} (site {} wants {want})",
                target.resource,
                mapped.join(","),
                target.site
            ),
        ))
    }

    pub(super) async fn own_vip(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let now = self.read_vip(ctx, target).await?;
        if now.holds {
            return Ok(now);
        }
        let want = self.vip_address(target)?;
        let path = format!("api/v2/cmdb/firewall/vip/{}", encode(&target.resource));
        let body = json!({ "mappedip": [{ "range": want }], "status": "enable" });
        self.ok(Method::PUT, &path, Some(&body)).await?;
        self.wait_ha_sync().await?;
        self.read_vip(ctx, target).await
    }
}
