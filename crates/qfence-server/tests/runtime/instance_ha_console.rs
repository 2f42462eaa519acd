//! The console's Instance HA page over HTTP, against the real runtime and the Nova simulator
//! (the setup of `instance_ha.rs`): a host dies, and the page (and its live stream, without a
//! reload) shows it fenced, left disabled, and each of its servers evacuated to another host.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures_util::StreamExt;
use qfence_runtime::{Access, Metrics, RuntimeBackend, TokenStore};
use tower::ServiceExt as _;

use super::lab::{eventually, phase};
use super::nova_cloud::{HOSTS, config, dump, host, start, start_cloud};

const VIEWER: &str = "viewer-token";

fn console(backend: &RuntimeBackend) -> axum::Router {
    let tokens = TokenStore::default().with_token(Access::Viewer, "grafana", VIEWER);
    qfence_server::router(
        Arc::new(backend.clone()),
        tokens,
        Metrics::new(),
        &qfence_server::ApiConfig::default(),
    )
}

fn signed_in(path: &str) -> Request<Body> {
    Request::get(path)
        .header(header::COOKIE, format!("qfence_session={VIEWER}"))
        .body(Body::empty())
        .expect("a request")
}

/// The page's HTML, as a viewer.
async fn page(app: &axum::Router) -> Result<String> {
    let resp = app.clone().oneshot(signed_in("/instance-ha")).await?;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
    let html = String::from_utf8_lossy(&bytes).into_owned();
    if status != StatusCode::OK {
        bail!("{status}: {html}");
    }
    Ok(html)
}

/// The state a host's row shows, if the HTML has its row.
fn host_state(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("data-host=\"{name}\" data-state=\""))?;
    let rest = &html[at..];
    let start = rest.find("data-state=\"")? + "data-state=\"".len();
    let len = rest[start..].find('"')?;
    Some(rest[start..start + len].to_owned())
}

/// The row of an evacuation of `server`, from `<tr data-server=` to `</tr>`.
fn evacuation_row<'a>(html: &'a str, server: &str) -> Option<&'a str> {
    let at = html.find(&format!("<tr data-server=\"{server}\""))?;
    let len = html[at..].find("</tr>")?;
    Some(&html[at..at + len])
}

/// The host an evacuation row says its server went to from compute-2, if it names one.
fn evacuated_to(row: &str) -> Option<&str> {
    let from = "<td>compute-2</td><td>";
    let rest = &row[row.find(from)? + from.len()..];
    Some(&rest[..rest.find("</td>")?]).filter(|to| !to.is_empty())
}

/// Reads the Instance HA stream until it shows compute-2 left disabled with each of `doomed`
/// evacuated (done, with the host it went to): that event, and compute-2's states on the way.
async fn follow_until_evacuated<S, B, E>(
    stream: &mut S,
    doomed: &[String],
) -> Result<(String, Vec<String>)>
where
    S: futures_util::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: Into<anyhow::Error>,
{
    let mut states: Vec<String> = Vec::new();
    let follow = async {
        let mut text = String::new();
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(
                chunk.map_err(Into::into)?.as_ref(),
            ));
            // One event per part: `event: iha-clouds\ndata: ...\n\n`.
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                // Keep-alive comments and a passing `live-error` are not the part.
                if !event.starts_with("event: iha-clouds\n") {
                    continue;
                }
                let Some(state) = host_state(&event, "compute-2") else {
                    continue;
                };
                if states.last() != Some(&state) {
                    states.push(state.clone());
                }
                // Done once Nova accepted it; the server's new host shows from the poll after
                // Nova placed it there.
                let evacuated = doomed.iter().all(|id| {
                    evacuation_row(&event, id).is_some_and(|r| {
                        r.contains("data-state=\"done\"") && evacuated_to(r).is_some()
                    })
                });
                if state == "left disabled" && evacuated {
                    return Ok::<_, anyhow::Error>(event);
                }
            }
        }
        bail!("the stream ended")
    };
    let followed = tokio::time::timeout(Duration::from_secs(60), follow).await;
    let last = followed
        .with_context(|| format!("compute-2 not shown evacuated on the stream: {states:?}"))??;
    Ok((last, states))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_page_shows_a_dead_host_fenced_and_its_servers_evacuated_live() -> Result<()> {
    let cloud = start_cloud().await?;
    // Left disabled after its evacuation: the incident's record (and its evacuations) stays
    // for the page to show, instead of closing once the host is back in service.
    let (o, backend) = start(&config(&cloud, "    leave_disabled: true\n", &[])).await?;
    let app = console(&backend);

    phase("steady: the page lists the cloud, enabled, every host up, no evacuation");
    let html = eventually(
        Duration::from_secs(20),
        "every host up on the page",
        || async {
            let html = page(&app).await.ok()?;
            (1..=HOSTS)
                .all(|n| host_state(&html, &host(n)).as_deref() == Some("up"))
                .then_some(html)
        },
    )
    .await
    .inspect_err(|_| dump(&o))?;
    for want in [
        "id=\"cloud-overcloud\"",
        "Nova controller nova",
        "cloud-mode\">enabled",
        "fencing decision",
        "None under way",
        "data-live=\"/live/instance-ha\"",
        "href=\"/instance-ha\"",
    ] {
        assert!(html.contains(want), "{want} in {html}");
    }
    let (doomed, names): (Vec<String>, Vec<String>) = cloud
        .nova
        .snapshot()
        .servers
        .iter()
        .filter(|s| s.host == "compute-2")
        .map(|s| (s.id.clone(), s.name.clone()))
        .unzip();
    assert!(!doomed.is_empty(), "compute-2 runs servers");

    phase("a viewer's live stream is open before the host dies");
    let resp = app.clone().oneshot(signed_in("/live/instance-ha")).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut stream = resp.into_body().into_data_stream();

    phase("compute-2's nova-compute dies: the stream shows it fenced, then evacuated");
    // A slow BMC keeps the fence under way for seconds: longer than the stream's poll (1 s),
    // so the stream must show it between `up` and the end.
    cloud.bmc.faults().set_latency(Duration::from_millis(600));
    cloud.nova.update(|s| s.stop_heartbeat("compute-2"));
    let (last, states) = follow_until_evacuated(&mut stream, &doomed)
        .await
        .inspect_err(|_| dump(&o))?;
    eprintln!("compute-2 as the stream showed it: {states:?}");
    assert_eq!(states.first().map(String::as_str), Some("up"), "{states:?}");
    assert!(
        states.len() >= 3,
        "the stream showed the incident on its way, not only its end: {states:?}"
    );

    phase("each evacuation names its server, from compute-2 to where Nova placed it");
    let snap = cloud.nova.snapshot();
    for (id, name) in doomed.iter().zip(&names) {
        let row = evacuation_row(&last, id).expect("a row per server");
        assert!(row.contains(&format!("\">{name} <small")), "named: {row}");
        let now_on = &snap
            .servers
            .iter()
            .find(|s| &s.id == id)
            .expect("the server")
            .host;
        assert_ne!(now_on, "compute-2");
        assert_eq!(evacuated_to(row), Some(now_on.as_str()), "{row}");
        assert!(
            row.contains("<td class=\"num\">1</td>"),
            "one attempt: {row}"
        );
    }

    phase("a reload shows the same: compute-2 fenced (proven at a time), since when, why");
    let html = page(&app).await?;
    let at = html.find("data-host=\"compute-2\"").expect("its row");
    let row = &html[at..at + html[at..].find("</tr>").expect("a row's end")];
    assert!(row.contains("left disabled"), "{row}");
    assert!(row.contains("(leave_disabled is set"), "{row}");
    assert!(row.contains("forced down"), "{row}");
    let steps = &html[html.find("class=\"plain iha-steps\"").expect("its steps")..];
    for step in [
        "compute-2: host down",
        "compute-2: fenced, read back",
        "compute-2: evacuating 2 server(s)",
    ] {
        assert!(steps.contains(step), "{step} in {steps}");
    }
    assert_eq!(
        row.matches(" UTC</td>").count(),
        2,
        "since when, and when its fence was proven: {row}"
    );

    o.shutdown().await;
    cloud.stop().await;
    Ok(())
}
