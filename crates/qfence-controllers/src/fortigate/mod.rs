//! FortiGate driver (FortiOS REST API, API key as `Authorization: Bearer`).
//!
//! The model: a FortiGate fences a site at the network level by disabling the firewall policy
//! that lets traffic reach it (`policy.disable`, also usable as a shield), and serves a plan by
//! pointing a virtual IP at the owner site's address (`vip.own`). Every write is a `PUT` of the
//! fields that change on one object in one VDOM, and counts only once a `GET` of the same
//! object shows them: FortiOS commits synchronously, but qfence believes the read-back, not
//! the write's answer (`revision_changed` is not documented as reliable).
//!
//! A disabled policy only stops established sessions when `firewall-session-dirty` is
//! `check-all` (the default) or the policy's own setting says so under `check-policy-option`.
//! With `check-new` established sessions live on, so the fence's condition does not hold.
//! When the key may not read `system/settings`, the default is assumed and the reading says so.
//!
//! In an FGCP cluster a change is made on the primary and synchronised to the peers: after a
//! write the driver waits until `monitor/system/ha-checksums` shows every member with the same
//! checksum, and a reading with members out of sync does not hold, so a firewall failover right
//! after cannot bring back the old configuration.
//!
//! Identity is the serial from `monitor/system/status`; in an HA cluster that is the serial
//! of whichever unit answered.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::driver::{
    Build, CallContext, CapabilityGrade, Discovered, Driver, DriverError, ErrorKind, Identity,
    Probe, Reading, Target, required_secret, unsupported,
};
use crate::http::{self, HttpClient};

const POLICY_DISABLE: &str = "policy.disable";
const VIP_OWN: &str = "vip.own";

/// The FortiGate driver. Holds the API key; never prints it.
pub struct FortigateDriver {
    id: ControllerId,
    base: url::Url,
    vdom: String,
    trust: TlsTrust,
    key: SecretString,
    client: OnceCell<HttpClient>,
}

impl std::fmt::Debug for FortigateDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FortigateDriver")
            .field("id", &self.id)
            .field("base", &self.base.as_str())
            .field("vdom", &self.vdom)
            .finish_non_exhaustive()
    }
}

/// Builds the driver from its configuration and API key. No I/O.
impl Build for FortigateDriver {
    const TYPE: ControllerType = ControllerType::Fortigate;

    fn build(
        id: ControllerId,
        config: &ControllerConfig,
        secret: Option<SecretString>,
    ) -> Result<Self, DriverError> {
        let ControllerKind::Fortigate { endpoint, vdom } = &config.kind else {
            return Err(DriverError::wrong_type(
                &id,
                config,
                ControllerType::Fortigate,
            ));
        };
        let key = required_secret(&id, Self::TYPE, secret)?;
        Ok(FortigateDriver {
            id,
            base: endpoint.clone(),
            vdom: vdom.clone().unwrap_or_else(|| "root".to_owned()),
            trust: config.tls.clone(),
            key,
            client: OnceCell::new(),
        })
    }
}

/// One HTTP answer: its status, its JSON body (or `Null`) and the certificate fingerprint.
struct Answer {
    status: StatusCode,
    body: Value,
    fingerprint: Option<String>,
}

impl FortigateDriver {
    fn err(
        &self,
        kind: ErrorKind,
        call: &str,
        msg: impl Into<String>,
        unknown: bool,
    ) -> DriverError {
        DriverError::new(kind, &self.id, call, msg, unknown)
    }

    /// The shared HTTPS client (TLS trust, same-origin redirects, no proxy), built on first
    /// use because it reads the CA file.
    async fn client(&self) -> Result<&HttpClient, DriverError> {
        self.client
            .get_or_try_init(|| async {
                http::build_client(&self.id, &self.trust)
                    .map_err(|e| self.err(ErrorKind::Unreachable, "tls", e.to_string(), false))
            })
            .await
    }

    /// Sends one request (in this driver's VDOM) and returns whatever came back.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, DriverError> {
        let call = format!("{method} {path}");
        let write = method != Method::GET;
        let client = self.client().await?;
        let mut url = self
            .base
            .join(path)
            .map_err(|e| self.err(ErrorKind::Protocol, &call, e.to_string(), false))?;
        url.query_pairs_mut().append_pair("vdom", &self.vdom);
        let mut req = client
            .client
            .request(method, url)
            .bearer_auth(self.key.expose_secret())
            .header("accept", "application/json");
        if let Some(b) = body {
            req = req.json(b);
        }
        // A write whose answer was lost may have been applied.
        let resp = req
            .send()
            .await
            .map_err(|e| http::map_error(&self.id, &call, &e, write))?;
        let status = resp.status();
        let fingerprint = client.seen.get();
        let bytes = http::read_body(&self.id, &call, resp, write).await?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            fingerprint,
        })
    }

    /// Sends a request and requires HTTP 2xx with `status: success` in the envelope.
    async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, DriverError> {
        let call = format!("{method} {path}");
        let write = method != Method::GET;
        let a = self.send(method, path, body).await?;
        let envelope_ok = a.body.get("status").and_then(Value::as_str) == Some("success");
        if a.status.is_success() && envelope_ok {
            return Ok(a);
        }
        let cli = a
            .body
            .get("cli_error")
            .and_then(Value::as_str)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        let (kind, msg) = match a.status.as_u16() {
            401 => (
                ErrorKind::Auth,
                "API key refused (401): wrong key, or this host is not in the api-user's trusthost"
                    .to_owned(),
            ),
            403 => (
                ErrorKind::Rejected,
                format!(
                    "the API key's access profile does not allow this in vdom {} (403)",
                    self.vdom
                ),
            ),
            404 => (
                ErrorKind::Rejected,
                format!("not found in vdom {} (404)", self.vdom),
            ),
            s if a.status.is_success() => (
                ErrorKind::Protocol,
                format!("HTTP {s} without `status: success` in the answer{cli}"),
            ),
            s => (ErrorKind::Rejected, format!("HTTP {s}{cli}")),
        };
        // A refused write (4xx) changed nothing; a 5xx write might have.
        let unknown = write && a.status.is_server_error();
        Err(self.err(kind, &call, msg, unknown))
    }

    async fn get_object(&self, table: &str, mkey: &str) -> Result<Value, DriverError> {
        let path = format!("api/v2/cmdb/firewall/{table}/{}", encode(mkey));
        let a = self.ok(Method::GET, &path, None).await?;
        first_result(&a.body).ok_or_else(|| {
            self.err(
                ErrorKind::Protocol,
                &format!("GET {path}"),
                "answer has no results[0]",
                false,
            )
        })
    }

    /// The VDOM's `firewall-session-dirty`, or `None` when the key may not read it.
    async fn session_dirty(&self) -> Result<Option<String>, DriverError> {
        let path = "api/v2/cmdb/system/settings";
        let a = self.send(Method::GET, path, None).await?;
        if a.status == StatusCode::FORBIDDEN {
            return Ok(None);
        }
        if !a.status.is_success() {
            return self.ok(Method::GET, path, None).await.map(|_| None);
        }
        let results = a.body.get("results");
        let obj = match results {
            Some(Value::Array(v)) => v.first(),
            other => other,
        };
        Ok(obj
            .and_then(|o| o.get("firewall-session-dirty"))
            .and_then(Value::as_str)
            .map(str::to_owned))
    }

    fn reading(&self, ctx: &CallContext, holds: bool, detail: String) -> Reading {
        Reading {
            holds,
            detail,
            at: SystemTime::now(),
            by: ctx.orchestrator.clone(),
            definitive: false,
        }
    }

    fn policy_id(&self, target: &Target) -> Result<u32, DriverError> {
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
    async fn read_policy(&self, ctx: &CallContext, id: u32) -> Result<Reading, DriverError> {
        let r = self.read_policy_here(ctx, id).await?;
        self.with_ha(r).await
    }

    /// Reads the policy on the unit that answers.
    async fn read_policy_here(&self, ctx: &CallContext, id: u32) -> Result<Reading, DriverError> {
        let p = self.get_object("policy", &id.to_string()).await?;
        let status = p.get("status").and_then(Value::as_str).unwrap_or("enable");
        if p.get("action").and_then(Value::as_str) == Some("deny") {
            return Ok(self.reading(
                ctx,
                false,
                format!(
                    "policy {id} is a deny policy (status={status}): disabling it fences nothing"
                ),
            ));
        }
        if status != "disable" {
            return Ok(self.reading(ctx, false, format!("policy {id} status={status}")));
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
            return Ok(self.reading(
                ctx,
                false,
                format!(
                    "policy {id} status=disable but firewall-session-dirty=check-new ({how}): \
                     established sessions are kept until cleared"
                ),
            ));
        }
        Ok(self.reading(
            ctx,
            true,
            format!("policy {id} status=disable, firewall-session-dirty={dirty} ({how})"),
        ))
    }

    async fn set_policy(
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
            let r = self.reading(
                ctx,
                status == "enable",
                format!("policy {id} status={status}"),
            );
            self.with_ha(r).await
        } else {
            self.read_policy(ctx, id).await
        }
    }

    /// The address the VIP must map to for the target's site.
    fn vip_address<'a>(&self, target: &'a Target) -> Result<&'a str, DriverError> {
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

    async fn read_vip(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
        let r = self.read_vip_here(ctx, target).await?;
        self.with_ha(r).await
    }

    async fn read_vip_here(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let want = self.vip_address(target)?;
        let v = self.get_object("vip", &target.resource).await?;
        let mapped = mapped_ips(&v);
        let status = v.get("status").and_then(Value::as_str).unwrap_or("enable");
        let holds = status == "enable" && mapped == [want];
        Ok(self.reading(
            ctx,
            holds,
            format!(
                "VIP {} status={status} mappedip={} (site {} wants {want})",
                target.resource,
                mapped.join(","),
                target.site
            ),
        ))
    }

    async fn own_vip(&self, ctx: &CallContext, target: &Target) -> Result<Reading, DriverError> {
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

    /// Reads the FGCP members' configuration checksums (`monitor/system/ha-checksums`).
    async fn ha_sync(&self) -> Result<HaSync, DriverError> {
        let path = "api/v2/monitor/system/ha-checksums";
        let a = self.send(Method::GET, path, None).await?;
        if matches!(a.status.as_u16(), 403 | 404) {
            return Ok(HaSync::Unreadable(a.status.as_u16()));
        }
        if !a.status.is_success() {
            self.ok(Method::GET, path, None).await?;
        }
        let members = a
            .body
            .get("results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if members.len() <= 1 {
            return Ok(HaSync::Standalone);
        }
        let mut sums: Vec<String> = members
            .iter()
            .map(|m| {
                m.pointer("/checksum/all")
                    .map(Value::to_string)
                    .unwrap_or_default()
            })
            .collect();
        sums.sort();
        sums.dedup();
        Ok(if sums.len() == 1 {
            HaSync::InSync(members.len())
        } else {
            HaSync::OutOfSync(members.len())
        })
    }

    /// After a write: waits until every HA member has the new configuration, so a failover of
    /// the firewall right after cannot bring back the old one. Bounded by the call's deadline.
    async fn wait_ha_sync(&self) -> Result<(), DriverError> {
        while let HaSync::OutOfSync(_) = self.ha_sync().await? {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A reading of this unit, completed by the HA state: out-of-sync peers mean it does not
    /// hold yet.
    async fn with_ha(&self, mut r: Reading) -> Result<Reading, DriverError> {
        match self.ha_sync().await? {
            HaSync::Standalone => {}
            HaSync::InSync(n) => r.detail.push_str(&format!("; {n} HA members in sync")),
            HaSync::OutOfSync(n) => {
                r.detail
                    .push_str(&format!("; {n} HA members, not all in sync yet"));
                r.holds = false;
            }
            HaSync::Unreadable(code) => r
                .detail
                .push_str(&format!("; HA sync state unreadable (HTTP {code})")),
        }
        Ok(r)
    }

    async fn grade(&self) -> Result<(Vec<CapabilityGrade>, Vec<String>), DriverError> {
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

    async fn firewall_write_grants(&self) -> Result<WriteGrants, DriverError> {
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
enum HaSync {
    Standalone,
    InSync(usize),
    OutOfSync(usize),
    Unreadable(u16),
}

#[derive(Debug, Clone, Copy)]
enum WriteGrants {
    All,
    None,
    Some,
    Hidden,
}

fn first_result(body: &Value) -> Option<Value> {
    match body.get("results")? {
        Value::Array(v) => v.first().cloned(),
        o @ Value::Object(_) => Some(o.clone()),
        _ => None,
    }
}

fn mapped_ips(vip: &Value) -> Vec<String> {
    vip.get("mappedip")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("range").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Percent-encodes one path segment (VIP names may hold spaces).
fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn valid_address(s: &str) -> bool {
    match s.split_once('-') {
        Some((a, b)) => {
            a.parse::<std::net::IpAddr>().is_ok() && b.parse::<std::net::IpAddr>().is_ok()
        }
        None => s.parse::<std::net::IpAddr>().is_ok(),
    }
}

impl Driver for FortigateDriver {
    fn controller_type(&self) -> ControllerType {
        ControllerType::Fortigate
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
