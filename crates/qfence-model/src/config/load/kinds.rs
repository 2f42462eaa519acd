//! Each controller type's own settings: one reader per type.

use std::collections::BTreeMap;

use super::Decoder;
use super::cluster::check_host_port;
use super::read::Fields;
use crate::catalog::ControllerType;
use crate::config::{ControllerKind, NovaInterface, ProxmoxAuth, RedfishAuth};
use crate::domain::FenceLevel;

impl Decoder {
    /// The type's own settings, and whether its endpoint is https (so `tls` applies).
    pub(super) fn kind(
        &mut self,
        ty: ControllerType,
        f: &Fields<'_>,
    ) -> Option<(ControllerKind, bool)> {
        match ty {
            ControllerType::Redfish => self.redfish(f),
            ControllerType::Ipmi => self.ipmi(f),
            ControllerType::Proxmox => self.proxmox(f),
            ControllerType::Fortigate => self.fortigate(f),
            ControllerType::Docker => self.docker(f),
            ControllerType::Postgres => self.postgres(f),
            ControllerType::FenceAgent => self.fence_agent(f),
            ControllerType::Nova => self.nova(f),
            // The agents come to the orchestrators: nothing to say where or how to reach them.
            ControllerType::Agent => Some((ControllerKind::Agent, false)),
        }
    }

    fn username(&mut self, f: &Fields<'_>) -> Option<String> {
        self.require(f, "username", "the account's user name")
            .and_then(|n| self.text(n, &f.path("username"), "a user name"))
    }

    /// `type: redfish`: an HTTPS endpoint, a user name and the way to log in.
    fn redfish(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["https"]);
        let username = self.username(f);
        let auth = self.opt(f, "auth", RedfishAuth::Session, |d, n, p| {
            d.word(
                n,
                p,
                "Redfish authentication",
                &[
                    ("session", RedfishAuth::Session),
                    ("basic", RedfishAuth::Basic),
                ],
            )
        });
        Some((
            ControllerKind::Redfish {
                endpoint: endpoint?,
                username: username?,
                auth: auth?,
            },
            true,
        ))
    }

    /// `type: ipmi`: a BMC's host[:port], a user name and a cipher suite with integrity.
    fn ipmi(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self
            .require(f, "endpoint", "the BMC's host[:port]")
            .and_then(|n| {
                let p = f.path("endpoint");
                let e = self.text(n, &p, "host[:port]")?;
                match check_host_port(&e, true) {
                    Ok(()) => Some(e),
                    Err(why) => {
                        self.error(&p, format!("{e:?} is not host[:port]: {why}"));
                        None
                    }
                }
            });
        let username = self.username(f);
        let cipher_suite = self.opt(f, "cipher_suite", 17, |d, n, p| {
            let c = d.count(n, p)?;
            const SUITES: [u32; 4] = [3, 8, 12, 17];
            if SUITES.contains(&c) {
                Some(c as u8)
            } else {
                d.error(
                    p,
                    format!(
                        "cipher suite {c} is not allowed; allowed: 3, 8, 12, 17 (the \
                         suites with authentication and integrity)"
                    ),
                );
                None
            }
        });
        Some((
            ControllerKind::Ipmi {
                endpoint: endpoint?,
                username: username?,
                cipher_suite: cipher_suite?,
            },
            false,
        ))
    }

    /// `type: proxmox`: an HTTPS endpoint and an API token id or a ticket's user name.
    fn proxmox(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["https"]);
        let auth = match (f.get("token_id"), f.get("username")) {
            (Some(t), None) => {
                let p = f.path("token_id");
                self.text(t, &p, "an API token id").and_then(|id| {
                    let ok = id
                        .split_once('@')
                        .and_then(|(user, rest)| {
                            let (realm, name) = rest.split_once('!')?;
                            Some(!user.is_empty() && !realm.is_empty() && !name.is_empty())
                        })
                        .unwrap_or(false);
                    if ok {
                        Some(ProxmoxAuth::Token { token_id: id })
                    } else {
                        self.error(
                            &p,
                            format!(
                                "{id:?} is not an API token id: expected \
                                 USER@REALM!TOKENID, e.g. qfence@pve!fence"
                            ),
                        );
                        None
                    }
                })
            }
            (None, Some(u)) => {
                let p = f.path("username");
                self.text(u, &p, "a user name").and_then(|u| {
                    if u.contains('@') {
                        Some(ProxmoxAuth::Ticket { username: u })
                    } else {
                        self.error(
                            &p,
                            format!("{u:?} has no realm: expected USER@REALM, e.g. root@pam"),
                        );
                        None
                    }
                })
            }
            (Some(_), Some(_)) => {
                self.error(
                    &f.path("username"),
                    "give token_id (an API token) or username (a ticket), not both",
                );
                None
            }
            (None, None) => {
                self.error(
                    &f.path("token_id"),
                    "missing: a proxmox controller needs token_id (an API token, \
                     recommended) or username (a ticket)",
                );
                None
            }
        };
        Some((
            ControllerKind::Proxmox {
                endpoint: endpoint?,
                auth: auth?,
            },
            true,
        ))
    }

    /// `type: fortigate`: an HTTPS endpoint and, optionally, a VDOM.
    fn fortigate(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["https"]);
        let vdom = match f.get("vdom") {
            None => Some(None),
            Some(n) => self.text(n, &f.path("vdom"), "a VDOM name").map(Some),
        };
        Some((
            ControllerKind::Fortigate {
                endpoint: endpoint?,
                vdom: vdom?,
            },
            true,
        ))
    }

    /// `type: docker`: a unix socket or an HTTPS endpoint.
    fn docker(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["unix", "https"])?;
        let https = endpoint.scheme() == "https";
        Some((ControllerKind::Docker { endpoint }, https))
    }

    /// `type: postgres`: a postgresql:// endpoint and a user name.
    fn postgres(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["postgresql", "postgres"]);
        let username = self.username(f);
        Some((
            ControllerKind::Postgres {
                endpoint: endpoint?,
                username: username?,
            },
            true,
        ))
    }

    /// `type: fence-agent`: a fence_NAME program, its options and the level it fences at.
    fn fence_agent(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let agent = self
            .require(f, "agent", "the fence agent's program name")
            .and_then(|n| {
                let p = f.path("agent");
                let a = self.text(n, &p, "a program name")?;
                let ok = a.strip_prefix("fence_").is_some_and(|rest| {
                    !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                if ok {
                    Some(a)
                } else {
                    self.error(
                        &p,
                        format!(
                            "{a:?} is not a fence agent name: expected fence_NAME, \
                             e.g. fence_ipmilan (a program name, not a path)"
                        ),
                    );
                    None
                }
            });
        let options = match f.get("options") {
            None => Some(BTreeMap::new()),
            Some(n) => self.string_map(n, &f.path("options"), "agent options"),
        };
        let levels: Vec<(&str, FenceLevel)> =
            FenceLevel::ALL.iter().map(|l| (l.as_str(), *l)).collect();
        let level = self.opt(f, "level", FenceLevel::Compute, |d, n, p| {
            d.word(n, p, "fence level", &levels)
        });
        Some((
            ControllerKind::FenceAgent {
                agent: agent?,
                options: options?,
                level: level?,
            },
            false,
        ))
    }

    /// `type: nova`: an HTTPS Keystone endpoint, a password or an application credential, the
    /// catalog interface and region.
    fn nova(&mut self, f: &Fields<'_>) -> Option<(ControllerKind, bool)> {
        let endpoint = self.url(f, &["https"]);
        let auth = super::nova::nova_auth(self, f);
        let interface = self.opt(f, "interface", NovaInterface::Public, |d, n, p| {
            d.word(
                n,
                p,
                "catalog interface",
                &[
                    ("public", NovaInterface::Public),
                    ("internal", NovaInterface::Internal),
                    ("admin", NovaInterface::Admin),
                ],
            )
        });
        let region = match f.get("region") {
            None => Some(None),
            Some(n) => self.text(n, &f.path("region"), "a region name").map(Some),
        };
        Some((
            ControllerKind::Nova {
                endpoint: endpoint?,
                auth: auth?,
                interface: interface?,
                region: region?,
            },
            true,
        ))
    }
}
