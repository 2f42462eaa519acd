//! The systems a Redfish service lists, and finding the one a binding names.

use super::*;

/// What qfence reads of a `ComputerSystem`.
#[derive(Debug, Clone)]
pub(super) struct System {
    pub(super) uri: String,
    pub(super) id: String,
    pub(super) uuid: String,
    pub(super) name: String,
    pub(super) host_name: String,
    pub(super) power: String,
    pub(super) reset_target: Option<String>,
    /// `None` when the service does not list them.
    pub(super) allowed: Option<Vec<String>>,
}

impl System {
    pub(super) fn from_json(uri: &str, v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let action = v.pointer("/Actions/#ComputerSystem.Reset");
        Self {
            uri: uri.to_owned(),
            id: s("Id"),
            uuid: s("UUID"),
            name: s("Name"),
            host_name: s("HostName"),
            power: s("PowerState"),
            reset_target: action
                .and_then(|a| a.get("target"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            allowed: action
                .and_then(|a| a.get("ResetType@Redfish.AllowableValues"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                }),
        }
    }

    /// Whether this is the system the resource names. Exact matches only (UUIDs ignore case).
    pub(super) fn is(&self, resource: &str) -> bool {
        (!self.id.is_empty() && self.id == resource)
            || (!self.uuid.is_empty() && self.uuid.eq_ignore_ascii_case(resource))
            || (!self.name.is_empty() && self.name == resource)
            || (!self.host_name.is_empty() && self.host_name == resource)
    }

    pub(super) fn allows(&self, reset: &str) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.iter().any(|x| x == reset))
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "PowerState={} (system {} \"{}\", UUID {})",
            if self.power.is_empty() {
                "(missing)"
            } else {
                &self.power
            },
            self.id,
            self.name,
            self.uuid
        )
    }
}

impl RedfishDriver {
    pub(super) async fn read_system(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        uri: &str,
    ) -> Result<System, DriverError> {
        let v = self.get(ctx, auth, uri).await?;
        // After a same-origin redirect (sushy: by name → by UUID) the body names itself.
        let uri = v.get("@odata.id").and_then(Value::as_str).unwrap_or(uri);
        Ok(System::from_json(uri, &v))
    }

    /// Every member of the systems collection.
    pub(super) async fn list_systems(
        &self,
        ctx: &CallContext,
        auth: &Auth,
    ) -> Result<Vec<System>, DriverError> {
        let coll = self.get(ctx, auth, SYSTEMS).await?;
        let members = coll
            .get("Members")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                self.err(
                    ErrorKind::Protocol,
                    &format!("GET {SYSTEMS}"),
                    "the systems collection has no Members",
                    false,
                )
            })?;
        let mut out = Vec::new();
        for m in members.iter().take(256) {
            let Some(uri) = m.get("@odata.id").and_then(Value::as_str) else {
                continue;
            };
            out.push(self.read_system(ctx, auth, uri).await?);
        }
        Ok(out)
    }

    /// The system a resource names, read now.
    pub(super) async fn system(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        call: &str,
        resource: &str,
    ) -> Result<System, DriverError> {
        let cached = self
            .systems
            .lock()
            .ok()
            .and_then(|m| m.get(resource).cloned());
        let mut candidates = Vec::new();
        if let Some(uri) = cached {
            candidates.push(uri);
        }
        if is_safe_segment(resource) {
            candidates.push(format!("{SYSTEMS}/{resource}"));
        }
        for uri in candidates {
            match self.read_system(ctx, auth, &uri).await {
                Ok(s) if s.is(resource) => {
                    self.remember(resource, &s.uri);
                    return Ok(s);
                }
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::Rejected => {}
                Err(e) => return Err(e),
            }
        }
        let all = self.list_systems(ctx, auth).await?;
        let found: Vec<&System> = all.iter().filter(|s| s.is(resource)).collect();
        match found.as_slice() {
            [one] => {
                self.remember(resource, &one.uri);
                Ok((*one).clone())
            }
            [] => Err(self.err(
                ErrorKind::Rejected,
                call,
                format!(
                    "no system has the id, UUID or name {resource:?}; the service has: {}",
                    list_names(&all)
                ),
                false,
            )),
            many => Err(self.err(
                ErrorKind::Rejected,
                call,
                format!(
                    "{} systems match {resource:?} ({}); name one by its id or UUID",
                    many.len(),
                    many.iter()
                        .map(|s| s.uri.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                false,
            )),
        }
    }

    pub(super) fn remember(&self, resource: &str, uri: &str) {
        if let Ok(mut m) = self.systems.lock() {
            m.insert(resource.to_owned(), uri.to_owned());
        }
    }
}

pub(super) fn list_names(all: &[System]) -> String {
    if all.is_empty() {
        return "no systems".into();
    }
    all.iter()
        .map(|s| format!("{} (\"{}\", UUID {})", s.id, s.name, s.uuid))
        .collect::<Vec<_>>()
        .join(", ")
}
