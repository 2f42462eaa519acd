//! `controllers:`: what every controller has (type, site, reach, secret, timeout, TLS); the
//! type's own settings are in [`super::kinds`].

use std::collections::{BTreeMap, BTreeSet};

use super::credentials::INLINE_CREDENTIAL;
use super::read::Fields;
use super::{Decoder, child, index, list_names};
use crate::catalog::{ControllerType, SecretUse};
use crate::config::tree::{Node, Value};
use crate::config::{ControllerConfig, OrchestratorConfig, TlsTrust, keys};
use crate::ids::{ControllerId, OrchestratorId, SecretRef, SiteId};

impl Decoder {
    pub(super) fn controllers(
        &mut self,
        node: &Node,
        path: &str,
        orchestrators: Option<&BTreeMap<OrchestratorId, OrchestratorConfig>>,
    ) -> (BTreeMap<ControllerId, ControllerConfig>, bool) {
        let entries = self.named(node, path, "controllers");
        for (name, _) in &entries {
            self.declared_controllers.insert(name.clone());
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            match (
                ControllerId::new(name.clone()),
                self.controller(n, &p, name),
            ) {
                (Ok(id), Some(c)) => {
                    out.insert(id, c);
                }
                _ => ok = false,
            }
            if let (Some(orch), Some((site, reach))) =
                (orchestrators, self.controller_sites.get(name).cloned())
            {
                self.check_callable(&p, &site, &reach, orch);
            }
        }
        (out, ok)
    }

    fn check_callable(
        &mut self,
        path: &str,
        site: &SiteId,
        reach: &[SiteId],
        orchestrators: &BTreeMap<OrchestratorId, OrchestratorConfig>,
    ) {
        let allowed_sites: Vec<&SiteId> = std::iter::once(site).chain(reach).collect();
        if orchestrators
            .values()
            .any(|o| allowed_sites.contains(&&o.site))
        {
            return;
        }
        let allowed = list_names(allowed_sites.iter().map(|s| s.as_str()));
        let at: BTreeSet<&str> = orchestrators.values().map(|o| o.site.as_str()).collect();
        self.error(
            &child(path, "site"),
            format!(
                "no orchestrator may call this controller: none runs at its site or reach \
                 ({allowed}); orchestrators run at: {}",
                list_names(at)
            ),
        );
    }

    fn controller(&mut self, node: &Node, path: &str, name: &str) -> Option<ControllerConfig> {
        // The type decides which other keys are allowed, so it is read first.
        let ty = self.controller_type(node, path)?;
        self.controller_types.insert(name.to_owned(), ty);
        let allowed: Vec<&'static str> = keys::CONTROLLER
            .iter()
            .chain(keys::controller_type(ty))
            .copied()
            .collect();
        let f = self.fields(node, path, &allowed)?;

        let site = self
            .require(&f, "site", "the site where the controller lives")
            .and_then(|n| self.site_ref(n, &f.path("site"), false, "runs no controllers"));
        let reach = self.reach(&f, site.as_ref());
        if let (Some(site), Some(reach)) = (&site, &reach) {
            self.controller_sites
                .insert(name.to_owned(), (site.clone(), reach.clone()));
        }
        let secret = self.secret(&f, ty);
        let timeout = self.opt(
            &f,
            "timeout_seconds",
            crate::config::DEFAULT_CALL_TIMEOUT,
            Self::seconds,
        );
        let (kind, https) = self.kind(ty, &f)?;
        let tls = match f.get("tls") {
            None => Some(TlsTrust::SystemRoots),
            Some(n) => {
                let p = f.path("tls");
                let t = self.tls(n, &p);
                if !https && t.is_some() {
                    self.error(&p, "tls applies only to an https endpoint");
                    None
                } else {
                    t
                }
            }
        };
        Some(ControllerConfig {
            site: site?,
            reach: reach?,
            secret: secret?,
            tls: tls?,
            timeout: timeout?,
            kind,
        })
    }

    /// The controller's `type:`, read before its other keys.
    fn controller_type(&mut self, node: &Node, path: &str) -> Option<ControllerType> {
        let ty = match &node.value {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.value.as_text().as_deref() == Some("type"))
                .map(|(_, v)| v),
            _ => None,
        };
        let type_names: Vec<(&str, ControllerType)> = ControllerType::ALL
            .iter()
            .map(|t| (t.as_str(), *t))
            .collect();
        match ty {
            Some(t) => self.word(t, &child(path, "type"), "controller type", &type_names),
            None => {
                if matches!(node.value, Value::Map(_)) {
                    self.error(
                        &child(path, "type"),
                        format!(
                            "missing: the controller's type is required; types: {}",
                            list_names(type_names.iter().map(|(n, _)| *n))
                        ),
                    );
                } else {
                    self.fields(node, path, keys::CONTROLLER);
                }
                None
            }
        }
    }

    /// `secret:`, a reference to the credential: required, optional or refused as the catalog
    /// says for the type ([`ControllerType::secret`]).
    fn secret(&mut self, f: &Fields<'_>, ty: ControllerType) -> Option<Option<SecretRef>> {
        match f.get("secret") {
            Some(_) if ty.secret() == SecretUse::Refused => {
                self.error(
                    &f.path("secret"),
                    "an agent controller takes no secret: each host agent authenticates with \
                     the certificate it enrolled with (mutual TLS)",
                );
                None
            }
            Some(n) => {
                let p = f.path("secret");
                match &n.value {
                    Value::Map(_) | Value::Seq(_) => {
                        self.error(
                            &p,
                            "expected the name of a secret reference, found a structure: \
                             `secret:` names a secret in each orchestrator's store, never the \
                             credential itself",
                        );
                        None
                    }
                    _ => self.name::<SecretRef>(n, &p, "a secret name").map(Some),
                }
            }
            None if ty.secret() == SecretUse::Required => {
                self.error(
                    &f.path("secret"),
                    format!(
                        "missing: a {ty} controller needs `secret: NAME`, a reference to its \
                         credential in each orchestrator's secret store"
                    ),
                );
                None
            }
            None => Some(None),
        }
    }

    fn reach(&mut self, f: &Fields<'_>, site: Option<&SiteId>) -> Option<Vec<SiteId>> {
        let Some(n) = f.get("reach") else {
            return Some(Vec::new());
        };
        let p = f.path("reach");
        let items = self.list(n, &p, "site names");
        let mut out: Vec<SiteId> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ip = index(&p, i);
            match self.site_ref(item, &ip, false, "makes no controller calls") {
                Some(s) if out.contains(&s) => {
                    self.error(&ip, format!("\"{s}\" is listed twice"));
                }
                Some(s) if Some(&s) == site => {
                    self.warn(&ip, format!("\"{s}\" is the controller's own site already"));
                }
                Some(s) => out.push(s),
                None => {}
            }
        }
        // Entries already reported are left out; the rest still serve the checks that follow.
        Some(out)
    }

    pub(super) fn url(&mut self, f: &Fields<'_>, schemes: &[&str]) -> Option<url::Url> {
        let n = self.require(f, "endpoint", "the controller's endpoint")?;
        let p = f.path("endpoint");
        let s = self.text(n, &p, "a URL")?;
        let example = format!("{}://...", schemes[0]);
        let u = match url::Url::parse(&s) {
            Ok(u) => u,
            Err(e) => {
                self.error(&p, format!("{s:?} is not a URL ({e}); expected {example}"));
                return None;
            }
        };
        if !schemes.contains(&u.scheme()) {
            self.error(
                &p,
                format!(
                    "scheme {:?} is not allowed here; allowed: {}",
                    u.scheme(),
                    schemes.join(", ")
                ),
            );
            return None;
        }
        if u.password().is_some() {
            self.error(&p, INLINE_CREDENTIAL);
            return None;
        }
        if u.scheme() != "unix" && u.host_str().is_none_or(str::is_empty) {
            self.error(&p, format!("{s:?} has no host; expected {example}"));
            return None;
        }
        Some(u)
    }

    fn tls(&mut self, node: &Node, path: &str) -> Option<TlsTrust> {
        let f = self.fields(node, path, keys::TLS)?;
        let mut chosen = Vec::new();
        let mut out = Some(TlsTrust::SystemRoots);
        if let Some(n) = f.get("pin") {
            chosen.push("pin");
            let p = f.path("pin");
            out = self.text(n, &p, "a certificate fingerprint").and_then(|s| {
                match normalise_pin(&s) {
                    Some(hex) => Some(TlsTrust::Pin(hex)),
                    None => {
                        self.error(
                            &p,
                            format!(
                                "{s:?} is not a pin: expected \"sha256:\" and 64 hex digits \
                                 (colons between bytes allowed)"
                            ),
                        );
                        None
                    }
                }
            });
        }
        if let Some(n) = f.get("ca_file") {
            chosen.push("ca_file");
            out = self
                .text(n, &f.path("ca_file"), "a file path")
                .map(TlsTrust::CaFile);
        }
        if let Some(n) = f.get("insecure") {
            let p = f.path("insecure");
            match self.boolean(n, &p) {
                Some(true) => {
                    chosen.push("insecure");
                    self.warn(
                        &p,
                        "insecure: true accepts any certificate, so anyone on the path can \
                         impersonate the controller; use pin or ca_file outside a lab",
                    );
                    out = Some(TlsTrust::Insecure);
                }
                Some(false) => {}
                None => out = None,
            }
        }
        if chosen.len() > 1 {
            self.error(
                path,
                format!(
                    "give only one of pin, ca_file, insecure; found {}",
                    chosen.join(", ")
                ),
            );
            return None;
        }
        out
    }
}

/// `sha256:AB:CD:...` or `sha256:abcd...` to 64 lower-case hex digits.
fn normalise_pin(s: &str) -> Option<String> {
    let (algo, rest) = s.split_once(':')?;
    if !algo.eq_ignore_ascii_case("sha256") {
        return None;
    }
    let hex: String = rest.chars().filter(|c| *c != ':').collect();
    (hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalised_to_lower_case_hex_without_colons() {
        let hex = "AB".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(
            normalise_pin(&format!("sha256:{hex}")),
            Some("ab".repeat(32))
        );
        assert_eq!(
            normalise_pin(&format!("SHA256:{colons}")),
            Some("ab".repeat(32))
        );
        assert_eq!(normalise_pin(&format!("sha1:{hex}")), None);
        assert_eq!(normalise_pin("sha256:abcd"), None);
        assert_eq!(normalise_pin(&"ab".repeat(32)), None);
    }
}
