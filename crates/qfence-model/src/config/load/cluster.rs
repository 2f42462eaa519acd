//! `cluster:`, `sites:` and `orchestrators:`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::read::Fields;
use super::{Decoder, child};
use crate::config::tree::{Node, Value};
use crate::config::{ClusterConfig, MaintenanceConfig, OrchestratorConfig, SiteConfig, keys};
use crate::domain::AgentAlgorithm;
use crate::ids::{OrchestratorId, SiteId, check_name};

impl Decoder {
    pub(super) fn cluster(&mut self, node: &Node, path: &str) -> Option<ClusterConfig> {
        let f = self.fields(node, path, keys::CLUSTER)?;
        let name = self
            .require(&f, "name", "the cluster's name")
            .and_then(|n| {
                let p = f.path("name");
                let s = self.text(n, &p, "a name")?;
                match check_name(&s) {
                    Ok(()) => Some(s),
                    Err(e) => {
                        self.error(&p, e.to_string());
                        None
                    }
                }
            });
        let lease = self.opt(&f, "lease_seconds", Duration::from_secs(2), Self::seconds);
        let maintenance = self.maintenance(&f);
        Some(ClusterConfig {
            name: name?,
            lease: lease?,
            maintenance: maintenance?,
        })
    }

    /// The maintenance keys of `cluster:`.
    fn maintenance(&mut self, f: &Fields<'_>) -> Option<MaintenanceConfig> {
        let d = MaintenanceConfig::default();
        let timeout = self.opt(f, "maintenance_timeout_seconds", d.timeout, Self::seconds);
        let algorithms: Vec<(&str, AgentAlgorithm)> = AgentAlgorithm::ALL
            .iter()
            .map(|a| (a.as_str(), *a))
            .collect();
        let agent_algorithm = self.opt(f, "agent_algorithm", d.agent_algorithm, |dec, n, p| {
            dec.word(n, p, "agent algorithm", &algorithms)
        });
        let rate = self.opt(
            f,
            "agent_migrations_per_second",
            d.agent_migrations_per_second,
            |dec, n, p| match dec.count(n, p)? {
                0 => {
                    dec.error(
                        p,
                        "agent_migrations_per_second must be 1 or more: at 0 no agent could \
                         ever move, and every maintenance would time out",
                    );
                    None
                }
                r => Some(r),
            },
        );
        Some(MaintenanceConfig {
            timeout: timeout?,
            agent_algorithm: agent_algorithm?,
            agent_migrations_per_second: rate?,
        })
    }

    pub(super) fn sites(
        &mut self,
        node: &Node,
        path: &str,
    ) -> Option<BTreeMap<SiteId, SiteConfig>> {
        let entries = self.named(node, path, "sites");
        if entries.is_empty() {
            if matches!(&node.value, Value::Null)
                || matches!(&node.value, Value::Map(m) if m.is_empty())
            {
                self.error(path, "expected at least one site");
            }
            return None;
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            let site = self.fields(n, &p, keys::SITE).and_then(|f| {
                let witness = self.opt(&f, "witness", false, Self::boolean)?;
                Some(SiteConfig { witness })
            });
            self.declared_sites
                .insert(name.clone(), site.as_ref().is_some_and(|s| s.witness));
            match (SiteId::new(name.clone()), site) {
                (Ok(id), Some(site)) => {
                    out.insert(id, site);
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    pub(super) fn orchestrators(
        &mut self,
        node: &Node,
        path: &str,
    ) -> Option<BTreeMap<OrchestratorId, OrchestratorConfig>> {
        let entries = self.named(node, path, "orchestrators");
        if entries.is_empty() {
            self.error(path, "expected at least one orchestrator");
            return None;
        }
        let mut ok = true;
        let mut out = BTreeMap::new();
        let mut addresses: HashMap<String, String> = HashMap::new();
        for (name, n) in &entries {
            let p = child(path, name);
            let Some(f) = self.fields(n, &p, keys::ORCHESTRATOR) else {
                ok = false;
                continue;
            };
            let site = self
                .require(&f, "site", "the orchestrator's site")
                .and_then(|n| self.site_ref(n, &f.path("site"), true, ""));
            let address = self
                .require(&f, "address", "the orchestrator's host:port")
                .and_then(|n| {
                    let ap = f.path("address");
                    let a = self.text(n, &ap, "host:port")?;
                    if let Err(why) = check_host_port(&a, false) {
                        self.error(&ap, format!("{a:?} is not host:port: {why}"));
                        return None;
                    }
                    if let Some(other) = addresses.get(&a) {
                        self.error(
                            &ap,
                            format!("{a:?} is already the address of orchestrator {other:?}"),
                        );
                        return None;
                    }
                    addresses.insert(a.clone(), name.clone());
                    Some(a)
                });
            match (OrchestratorId::new(name.clone()), site, address) {
                (Ok(id), Some(site), Some(address)) => {
                    out.insert(id, OrchestratorConfig { site, address });
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }
}

/// `host:port`, `[v6]:port`; with `port_optional`, also `host` and `[v6]`.
pub(super) fn check_host_port(s: &str, port_optional: bool) -> Result<(), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((h, after)) = rest.split_once(']') else {
            return Err("an IPv6 address needs its closing ']'".to_owned());
        };
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{h:?} is not an IPv6 address"));
        }
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return Err("expected ':' and a port after ']'".to_owned()),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => {
                if h.contains(':') {
                    return Err("write an IPv6 address in brackets: [::1]:7401".to_owned());
                }
                (h, Some(p))
            }
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':' | '_'))
    {
        return Err(format!("{host:?} is not a host name or address"));
    }
    match port {
        None if port_optional => Ok(()),
        None => Err("the port is missing".to_owned()),
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{p:?} is not a port (1-65535)")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_accepts_names_v4_and_bracketed_v6() {
        assert!(check_host_port("127.0.0.1:7401", false).is_ok());
        assert!(check_host_port("orch-a.example:7401", false).is_ok());
        assert!(check_host_port("[::1]:7401", false).is_ok());
        assert!(check_host_port("10.0.0.5", true).is_ok());
        assert!(check_host_port("10.0.0.5", false).is_err());
        assert!(check_host_port("::1:7401", false).is_err());
        assert!(check_host_port("host:0", false).is_err());
        assert!(check_host_port("host:99999", false).is_err());
        assert!(check_host_port(":7401", false).is_err());
    }
}
