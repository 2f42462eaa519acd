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
//! after cannot bring back the old configuration. A reading's HA state is read after the
//! object was, and one HA read answers every reading waiting for it at that moment.
//!
//! Identity is the serial from `monitor/system/status`; in an HA cluster that is the serial
//! of whichever unit answered.

use std::collections::BTreeMap;
use std::time::Duration;

use qfence_model::config::{ControllerConfig, ControllerKind, TlsTrust};
use qfence_model::{ControllerId, ControllerType, Grade};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::driver::{
    Build, CallContext, CapabilityGrade, ControllerErrors, Discovered, Driver, DriverError,
    ErrorKind, Identity, Probe, Reading, Target, required_secret, unsupported,
};
use crate::http::{self, HttpClient};

mod client;
mod driver;
mod ha;
mod policy;
mod probe;
mod vip;

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
    ha: ha::HaShare,
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

/// One HTTP answer: its status, its JSON body (or `Null`) and the certificate fingerprint.
struct Answer {
    status: StatusCode,
    body: Value,
    fingerprint: Option<String>,
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
