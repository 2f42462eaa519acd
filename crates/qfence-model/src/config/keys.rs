//! The configuration's keys, defined once. The loader accepts exactly these (any other key is
//! an error naming them), the console's forms have a place for each, and the fuzzer builds
//! its documents from them; a key added here reaches all three.

use crate::catalog::ControllerType;

/// The document's sections.
pub const TOP: &[&str] = &[
    "cluster",
    "sites",
    "orchestrators",
    "controllers",
    "plans",
    "instance_ha",
];

/// `cluster:`
pub const CLUSTER: &[&str] = &[
    "name",
    "lease_seconds",
    "maintenance_timeout_seconds",
    "agent_algorithm",
    "agent_migrations_per_second",
];

/// `sites.NAME:`
pub const SITE: &[&str] = &["witness"];

/// `orchestrators.NAME:`
pub const ORCHESTRATOR: &[&str] = &["site", "address"];

/// `controllers.NAME:`, whatever the type.
pub const CONTROLLER: &[&str] = &["type", "site", "reach", "secret", "timeout_seconds"];

/// `controllers.NAME:`, the keys of one type besides [`CONTROLLER`].
pub fn controller_type(ty: ControllerType) -> &'static [&'static str] {
    match ty {
        ControllerType::Redfish => &["endpoint", "tls", "username", "auth"],
        ControllerType::Ipmi => &["endpoint", "username", "cipher_suite"],
        ControllerType::Proxmox => &["endpoint", "tls", "token_id", "username"],
        ControllerType::Fortigate => &["endpoint", "tls", "vdom"],
        ControllerType::Docker => &["endpoint", "tls"],
        ControllerType::Postgres => &["endpoint", "tls", "username"],
        ControllerType::FenceAgent => &["agent", "options", "level"],
        ControllerType::Agent => &[],
        ControllerType::Nova => &[
            "endpoint",
            "tls",
            "username",
            "user_domain",
            "project",
            "project_domain",
            "application_credential_id",
            "interface",
            "region",
        ],
    }
}

/// The types that have `key` among their own keys, in [`ControllerType::ALL`] order.
pub fn types_with(key: &str) -> impl Iterator<Item = ControllerType> + '_ {
    ControllerType::ALL
        .into_iter()
        .filter(move |t| controller_type(*t).contains(&key))
}

/// `controllers.NAME.tls:`: one of them.
pub const TLS: &[&str] = &["pin", "ca_file", "insecure"];

/// `plans.NAME:`
pub const PLAN: &[&str] = &[
    "owner",
    "priority",
    "interval_seconds",
    "freshness_seconds",
    "recovery_after_seconds",
    "max_recoveries",
    "failover_after_seconds",
    "failover_after_definitive",
    "fence_timeout_seconds",
    "max_retries",
    "unfence_on_promote",
    "auto_failover",
    "standby",
    "rejoin",
    "instances",
    "service",
];

/// A binding, in `plans.NAME.instances.SITE[i]` or `plans.NAME.service[i]`.
pub const BINDING: &[&str] = &[
    "id",
    "controller",
    "capability",
    "resource",
    "role",
    "required",
    "params",
];

/// Keys that hold a credential. Refused anywhere in the file (written in any case, `-` for
/// `_`): credentials are named by `secret:` and resolved by each orchestrator from its own
/// store.
pub const CREDENTIAL: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "api_key",
    "apikey",
    "api_token",
    "access_token",
    "auth_token",
    "bearer",
    "secret_value",
    "secret_key",
    "client_secret",
    "private_key",
    "access_key",
    "credential",
    "credentials",
    "community",
];

/// Whether `key` holds a credential ([`CREDENTIAL`]).
pub fn is_credential(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace('-', "_");
    CREDENTIAL.contains(&k.as_str())
}

/// Every key the file may have, each once, in the order of the sections.
pub fn all() -> Vec<&'static str> {
    let typed = ControllerType::ALL.into_iter().flat_map(controller_type);
    let mut out: Vec<&'static str> = Vec::new();
    for k in TOP
        .iter()
        .chain(CLUSTER)
        .chain(SITE)
        .chain(ORCHESTRATOR)
        .chain(CONTROLLER)
        .chain(typed)
        .chain(TLS)
        .chain(PLAN)
        .chain(BINDING)
    {
        if !out.contains(k) {
            out.push(k);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_is_a_credential() {
        for k in all() {
            assert!(!is_credential(k), "{k}");
        }
        assert!(is_credential("API-Key"));
    }

    #[test]
    fn types_with_an_endpoint_are_all_but_fence_agents() {
        let t: Vec<&str> = types_with("endpoint").map(ControllerType::as_str).collect();
        assert_eq!(
            t,
            [
                "redfish",
                "ipmi",
                "proxmox",
                "fortigate",
                "docker",
                "postgres",
                "nova"
            ]
        );
    }
}
