//! The Instance HA page: for each cloud, whether it acts (or only records failures), its last
//! decision's sentence, the gates closed, each compute host with its state and since when,
//! and the evacuations with their server, from and to host, state and attempts, then the
//! cloud's recent steps from the event log (they outlive an incident, which closes once its
//! host is back). The clouds are a live part (`live.rs`), so an operator watching a host die
//! sees it fenced and evacuated without reloading. The state comes from the backend's
//! `instance_ha()`, the same answer as `GET /api/v1/instance-ha`.

use askama::Template;
use axum::Router;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;

use super::{Session, error_page, fmt_ms, page};
use crate::api::AppState;
use qfence_runtime::auth::Caller;
use qfence_runtime::backend::BackendError;
use qfence_runtime::dto::{CloudStatus, EvacuationStatus, HostStatus, InstanceHaStatus};
use qfence_runtime::events::{Event, EventKind, EventQuery, MAX_PAGE};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/instance-ha", get(instance_ha))
}

/// The id of the live part: every cloud's card.
pub(crate) const PART: &str = "iha-clouds";
/// How many of the cloud's steps a card lists, newest first.
const STEPS_SHOWN: usize = 15;

/// A step of the cloud's incidents, from the event log.
#[derive(Debug, Clone)]
pub(crate) struct StepRow {
    pub time: String,
    pub alarm: bool,
    pub message: String,
}

/// A compute host, as its row shows it.
#[derive(Debug, Clone)]
pub(crate) struct HostRow {
    pub host: String,
    pub state: String,
    /// The state chip's CSS class.
    pub class: &'static str,
    /// `2026-12-08 00:14:03 UTC`, or empty for a host that is up.
    pub since: String,
    pub service: String,
    /// When its fence was proven by read-back.
    pub fenced_at: String,
    pub incident: String,
    pub why: String,
}

/// A server's evacuation, as its row shows it.
#[derive(Debug, Clone)]
pub(crate) struct EvacRow {
    pub server: String,
    /// Its name, or its id when the name is not known.
    pub name: String,
    pub from: String,
    pub to: String,
    pub state: String,
    pub class: &'static str,
    pub attempts: u32,
    pub failures: u32,
    pub lock: String,
}

/// One cloud, as its card shows it.
#[derive(Debug, Clone)]
pub(crate) struct CloudCard {
    pub name: String,
    pub nova: String,
    pub disabled: bool,
    pub leading: bool,
    pub nova_reachable: bool,
    pub last_decision: Option<String>,
    pub decided_at: String,
    pub gates_closed: Vec<String>,
    /// Hosts by state, in the order first seen: (state, how many).
    pub counts: Vec<(String, usize)>,
    pub hosts: Vec<HostRow>,
    pub evacuations: Vec<EvacRow>,
    /// Its newest steps (a host down, fenced, evacuated, back in service, alarms).
    pub steps: Vec<StepRow>,
}

/// The CSS class of a host's state: what an operator should make of it at a glance.
pub(crate) fn host_class(state: &str) -> &'static str {
    match state {
        "up" => "ok",
        "disabled" => "idle",
        "failed" | "halted" => "bad",
        "kdump wait" | "fencing" | "verifying" => "fencing",
        "left disabled" => "warn",
        // isolating, evacuating, powering on, enabling: the incident moves.
        _ => "busy",
    }
}

fn evac_class(state: &str) -> &'static str {
    match state {
        "done" => "ok",
        "unsuccessful" => "bad",
        _ => "busy",
    }
}

fn time(ms: Option<u64>) -> String {
    ms.map(|t| format!("{} UTC", fmt_ms(t))).unwrap_or_default()
}

fn host_row(h: &HostStatus) -> HostRow {
    let mut service = h.service.clone().unwrap_or_default();
    if h.forced_down == Some(true) {
        service.push_str(", forced down");
    }
    HostRow {
        host: h.host.clone(),
        state: h.state.clone(),
        class: host_class(&h.state),
        since: time(h.since_ms),
        service,
        fenced_at: time(h.fenced_at_ms),
        incident: h.incident.map(|i| i.to_string()).unwrap_or_default(),
        why: h.why.as_deref().map(why_in_words).unwrap_or_default(),
    }
}

/// Why a host was left disabled or halted, in words (the API's `why` is a keyword).
fn why_in_words(why: &str) -> String {
    match why {
        "asked" => "leave_disabled is set: an operator brings it back",
        "unsuccessful" => "some evacuations were unsuccessful, and force_enable is off",
        "poweronfailed" => "it could not be powered back on",
        "fence-not-proven" => "its fence could not be proven: nothing of it is evacuated",
        "smart-evacuation-failed" => "a server's evacuation failed every retry: act by hand",
        "powered-on-while-evacuated" => "it powered on while its servers were being evacuated",
        other => other,
    }
    .to_owned()
}

fn evac_row(e: &EvacuationStatus) -> EvacRow {
    EvacRow {
        server: e.server.clone(),
        name: e.server_name.clone().unwrap_or_else(|| e.server.clone()),
        from: e.host.clone(),
        to: e.to_host.clone().unwrap_or_default(),
        state: e.state.clone(),
        class: evac_class(&e.state),
        attempts: e.requests,
        failures: e.failures,
        lock: e.lock.clone(),
    }
}

/// The newest [`STEPS_SHOWN`] steps of `cloud` among `records` (oldest first): the records
/// Instance HA writes for each step of an incident and each gate, not its sentences, commands
/// or results.
fn steps(cloud: &str, records: &[Event]) -> Vec<StepRow> {
    // Every record names its cloud first; the card already does.
    let prefix = format!("instance-ha {cloud}: ");
    records
        .iter()
        .rev()
        .filter(|e| {
            e.data.get("instance_ha").and_then(|c| c.as_str()) == Some(cloud)
                && e.data.get("event").is_some()
        })
        .take(STEPS_SHOWN)
        .map(|e| StepRow {
            time: time(Some(e.time_ms)),
            alarm: e.kind == EventKind::Alarm,
            message: e
                .message
                .strip_prefix(&prefix)
                .unwrap_or(&e.message)
                .to_owned(),
        })
        .collect()
}

/// The log's newest records (at most one page), oldest first.
async fn newest_records(s: &AppState) -> Result<Vec<Event>, BackendError> {
    let head = s
        .backend
        .events(&EventQuery {
            limit: Some(1),
            ..EventQuery::default()
        })
        .await?
        .head_seq;
    let page = s
        .backend
        .events(&EventQuery {
            after: Some(head.saturating_sub(u64::from(MAX_PAGE))).filter(|a| *a > 0),
            limit: Some(MAX_PAGE),
            ..EventQuery::default()
        })
        .await?;
    Ok(page.events)
}

impl CloudCard {
    pub fn new(c: &CloudStatus, records: &[Event]) -> Self {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for h in &c.hosts {
            match counts.iter_mut().find(|(s, _)| *s == h.state) {
                Some((_, n)) => *n += 1,
                None => counts.push((h.state.clone(), 1)),
            }
        }
        let mut evacuations: Vec<EvacRow> = c.evacuations.iter().map(evac_row).collect();
        evacuations.sort_by(|a, b| (&a.from, &a.server).cmp(&(&b.from, &b.server)));
        Self {
            name: c.cloud.clone(),
            nova: c.nova.clone(),
            disabled: c.disabled,
            leading: c.leading,
            nova_reachable: c.nova_reachable,
            last_decision: c.last_decision.clone(),
            decided_at: time(c.decided_at_ms),
            gates_closed: c.gates_closed.clone(),
            counts,
            hosts: c.hosts.iter().map(host_row).collect(),
            evacuations,
            steps: steps(&c.cloud, records),
        }
    }
}

/// Every cloud's card: the page's live part.
#[derive(Template)]
#[template(path = "console/instance_ha_clouds.html")]
pub(crate) struct CloudsPart {
    pub clouds: Vec<CloudCard>,
}

impl CloudsPart {
    pub fn new(status: &InstanceHaStatus, records: &[Event]) -> Self {
        Self {
            clouds: status
                .clouds
                .iter()
                .map(|c| CloudCard::new(c, records))
                .collect(),
        }
    }

    /// Loads and renders the part, as the page and the live stream show it.
    pub async fn load(s: &AppState) -> Result<String, BackendError> {
        let status = s.backend.instance_ha().await?;
        // No cloud, no steps to look for.
        let records = if status.clouds.is_empty() {
            Vec::new()
        } else {
            newest_records(s).await?
        };
        Self::new(&status, &records).render().map_err(|e| {
            tracing::error!(error = %e, "A console template failed to render: this is a bug");
            BackendError::Unavailable("the page could not be rendered".into())
        })
    }
}

#[derive(Template)]
#[template(path = "console/instance_ha.html")]
struct InstanceHaPage {
    who: Option<Caller>,
    title: String,
    clouds_html: String,
}

async fn instance_ha(session: Session, State(s): State<AppState>) -> Response {
    match CloudsPart::load(&s).await {
        Ok(clouds_html) => page(&InstanceHaPage {
            who: Some(session.caller),
            title: "Instance HA".into(),
            clouds_html,
        }),
        Err(e) => error_page(Some(&session), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, state: &str) -> HostStatus {
        HostStatus {
            cloud: "overcloud".into(),
            host: name.into(),
            state: state.into(),
            incident: None,
            since_ms: None,
            site: None,
            service: Some("up, enabled".into()),
            forced_down: Some(false),
            fenced_at_ms: None,
            why: None,
        }
    }

    #[test]
    fn a_card_counts_hosts_by_state_and_escapes_what_nova_names() {
        let mut dead = host("<b>compute-2</b>", "evacuating");
        dead.incident = Some(3);
        dead.since_ms = Some(0);
        dead.fenced_at_ms = Some(1_000);
        dead.forced_down = Some(true);
        let status = InstanceHaStatus {
            clouds: vec![CloudStatus {
                cloud: "overcloud".into(),
                nova: "nova".into(),
                disabled: false,
                leading: true,
                last_decision: Some("fencing decision: compute-2 <evacuating>".into()),
                decided_at_ms: Some(2_000),
                nova_reachable: true,
                hosts: vec![host("compute-1", "up"), dead, host("compute-3", "up")],
                evacuations: vec![EvacuationStatus {
                    cloud: "overcloud".into(),
                    host: "<b>compute-2</b>".into(),
                    incident: 3,
                    server: "vm-1".into(),
                    server_name: Some("erp-app".into()),
                    to_host: Some("compute-3".into()),
                    state: "done".into(),
                    requests: 2,
                    failures: 1,
                    lock: "unlocked".into(),
                }],
                gates_closed: vec![],
            }],
        };
        let part = CloudsPart::new(&status, &[]);
        let card = &part.clouds[0];
        assert_eq!(
            card.counts,
            vec![("up".to_owned(), 2), ("evacuating".to_owned(), 1)]
        );
        assert_eq!(card.hosts[1].service, "up, enabled, forced down");
        assert_eq!(card.hosts[1].since, "1970-01-01 00:00:00 UTC");
        let html = part.render().unwrap();
        assert!(!html.contains("<b>compute-2"), "{html}");
        assert!(html.contains("&#60;b&#62;compute-2"), "{html}");
        assert!(html.contains("compute-2 &#60;evacuating&#62;"), "{html}");
        assert!(html.contains("compute-3"), "{html}");
        assert!(html.contains("erp-app"), "{html}");
    }

    #[test]
    fn a_follower_and_a_disabled_cloud_say_so() {
        let cloud = CloudStatus {
            cloud: "overcloud".into(),
            nova: "nova".into(),
            disabled: true,
            leading: false,
            last_decision: None,
            decided_at_ms: None,
            nova_reachable: false,
            hosts: vec![],
            evacuations: vec![],
            gates_closed: vec!["heartbeat cliff".into()],
        };
        let html = CloudsPart::new(
            &InstanceHaStatus {
                clouds: vec![cloud],
            },
            &[],
        )
        .render()
        .unwrap();
        for want in [
            "disabled: failures are recorded",
            "This orchestrator does not lead",
            "read by the leader",
            "heartbeat cliff",
        ] {
            assert!(html.contains(want), "{want} in {html}");
        }
        assert!(
            !html.contains("UNREACHABLE"),
            "a follower does not poll Nova: {html}"
        );
    }

    fn record(seq: u64, kind: EventKind, message: &str, data: serde_json::Value) -> Event {
        Event {
            seq,
            time_ms: seq * 1_000,
            kind,
            plan: None,
            site: None,
            term: Some(1),
            generation: None,
            actor: "dc1-a".into(),
            message: message.into(),
            data,
            prev: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn a_cards_steps_are_its_clouds_step_records_newest_first() {
        use serde_json::json;
        let step = |c: &str| json!({"instance_ha": c, "host": "compute-2", "event": {}});
        let records = vec![
            record(
                1,
                EventKind::Decision,
                "instance-ha overcloud: compute-2: host down",
                step("overcloud"),
            ),
            record(
                2,
                EventKind::Decision,
                "fencing decision: ...",
                json!({"instance_ha": "overcloud"}),
            ),
            record(
                3,
                EventKind::Command,
                "instance-ha overcloud: fence compute-2",
                json!({"instance_ha": "overcloud", "op": "x"}),
            ),
            record(
                4,
                EventKind::Decision,
                "compute-9: host down",
                step("undercloud"),
            ),
            record(5, EventKind::Alarm, "compute-2: halted", step("overcloud")),
        ];
        let shown: Vec<(String, bool)> = steps("overcloud", &records)
            .into_iter()
            .map(|s| (s.message, s.alarm))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("compute-2: halted".to_owned(), true),
                ("compute-2: host down".to_owned(), false)
            ]
        );
    }

    #[test]
    fn no_cloud_renders_the_empty_state() {
        let html = CloudsPart::new(&InstanceHaStatus { clouds: vec![] }, &[])
            .render()
            .unwrap();
        assert!(html.contains("No Instance HA cloud"), "{html}");
    }
}
