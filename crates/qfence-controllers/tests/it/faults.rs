//! Bad answers: a fault-injecting Redfish server (axum, HTTPS on 127.0.0.1) that answers
//! invalid JSON, huge bodies, a slow drip, a redirect to another host, 5xx storms, nothing at
//! all, 400/409 on a power-off, and counts sessions. Every fault must give UNKNOWN (or the
//! read-back's verdict), with an error naming the controller and the call, within the
//! deadline, never a panic.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use qfence_controllers::driver::fence_verdict;
use qfence_controllers::redfish::RedfishDriver;
use qfence_controllers::{Driver, ErrorKind, Secret};
use qfence_model::config::{RedfishAuth, TlsTrust};
use qfence_model::{ControllerId, Verdict};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::compliance::{ctx, target};

/// What the server does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    InvalidJson,
    HugeBody,
    SlowDrip,
    RedirectElsewhere,
    Storm503,
    Hang,
    /// ForceOff answers 409, but the system did go off (iDRAC when already off).
    ConflictButOff,
    /// ForceOff answers 400 and the system stays on.
    RejectStaysOn,
    /// The account's role is ReadOnly.
    ReadOnlyRole,
    /// The service publishes no PrivilegeMap of its own.
    NoPrivilegeMap,
    /// The system starts off, and On is refused with 409 twice before it is taken (Fujitsu,
    /// right after a ForceOff).
    OnRefusedTwice,
    /// Sessions are made with PasswordChangeRequired.
    PasswordChangeRequired,
    /// ForceOff answers 202 with a task monitor whose task then fails; the system stays on.
    TaskFails,
}

#[derive(Debug)]
struct Bmc {
    fault: Fault,
    power: Mutex<&'static str>,
    on_refusals: AtomicU32,
    sessions_made: AtomicU32,
    sessions_deleted: AtomicU32,
    system_reads: AtomicU32,
}

type S = State<Arc<Bmc>>;

async fn root() -> Response {
    axum::Json(json!({
        "UUID": "aaaaaaaa-0000-4000-8000-000000000001",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}
    }))
    .into_response()
}

async fn login(State(b): S) -> Response {
    let n = b.sessions_made.fetch_add(1, Ordering::SeqCst) + 1;
    let mut h = HeaderMap::new();
    h.insert("X-Auth-Token", format!("token-{n}").parse().unwrap());
    h.insert(
        header::LOCATION,
        format!("/redfish/v1/SessionService/Sessions/{n}")
            .parse()
            .unwrap(),
    );
    let body = if b.fault == Fault::PasswordChangeRequired {
        json!({"Id": n.to_string(),
               "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PasswordChangeRequired"}]})
    } else {
        json!({"Id": n.to_string()})
    };
    (StatusCode::CREATED, h, axum::Json(body)).into_response()
}

async fn logout(State(b): S) -> StatusCode {
    b.sessions_deleted.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

async fn account_service(State(b): S) -> Response {
    if b.fault == Fault::NoPrivilegeMap {
        return axum::Json(
            json!({"Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}}),
        )
        .into_response();
    }
    axum::Json(json!({
        "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"},
        "PrivilegeMap": {"@odata.id": "/redfish/v1/AccountService/PrivilegeMap"}
    }))
    .into_response()
}

async fn privilege_map() -> Response {
    axum::Json(json!({"Mappings": [
        {"Entity": "Manager", "OperationMap": {"POST": [{"Privilege": ["ConfigureManager"]}]}},
        {"Entity": "ComputerSystem", "OperationMap": {
            "GET": [{"Privilege": ["Login"]}],
            "POST": [{"Privilege": ["ConfigureComponents"]}]}}
    ]}))
    .into_response()
}

async fn accounts() -> Response {
    axum::Json(json!({"Members": [
        {"@odata.id": "/redfish/v1/AccountService/Accounts/1"},
        {"@odata.id": "/redfish/v1/AccountService/Accounts/2"}
    ]}))
    .into_response()
}

async fn account(State(b): S, axum::extract::Path(n): axum::extract::Path<String>) -> Response {
    let role = if b.fault == Fault::ReadOnlyRole {
        "ReadOnly"
    } else {
        "Operator"
    };
    let (user, role) = if n == "1" {
        ("root", "Administrator")
    } else {
        ("admin", role)
    };
    axum::Json(json!({"UserName": user, "RoleId": role})).into_response()
}

async fn role(axum::extract::Path(r): axum::extract::Path<String>) -> Response {
    let privs = match r.as_str() {
        "ReadOnly" => json!(["Login", "ConfigureSelf"]),
        _ => json!(["Login", "ConfigureComponents", "ConfigureSelf"]),
    };
    axum::Json(json!({"Id": r, "AssignedPrivileges": privs})).into_response()
}

async fn task_monitor() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(json!({"error": {"message": "power controller fault"}})),
    )
        .into_response()
}

async fn systems() -> Response {
    axum::Json(json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})).into_response()
}

async fn system(State(b): S) -> Response {
    b.system_reads.fetch_add(1, Ordering::SeqCst);
    match b.fault {
        Fault::InvalidJson => return (StatusCode::OK, "{\"PowerState\": \"Of").into_response(),
        Fault::HugeBody => {
            // Twice the limit, no Content-Length: only counting stops it.
            let chunk = bytes_of(64 * 1024);
            let chunks = 2 * qfence_controllers::http::MAX_BODY_BYTES / (64 * 1024);
            let s = futures_util::stream::iter(
                (0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            return Response::new(Body::from_stream(s));
        }
        Fault::SlowDrip => {
            let s = futures_util::stream::unfold(0u32, |n| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Some((Ok::<_, std::io::Error>(vec![b' ']), n + 1))
            });
            return Response::new(Body::from_stream(s));
        }
        Fault::RedirectElsewhere => {
            return (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, "https://127.0.0.2:9/redfish/v1/Systems/1")],
            )
                .into_response();
        }
        Fault::Storm503 => return (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response(),
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        _ => {}
    }
    let power = *b.power.lock().unwrap();
    axum::Json(json!({
        "Id": "1", "Name": "host1", "UUID": "bbbbbbbb-0000-4000-8000-000000000001",
        "PowerState": power,
        "Actions": {"#ComputerSystem.Reset": {
            "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}}
    }))
    .into_response()
}

fn bytes_of(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}

async fn reset(State(b): S, body: String) -> Response {
    let off = body.contains("ForceOff");
    match b.fault {
        Fault::ConflictButOff => {
            *b.power.lock().unwrap() = "Off";
            (
                StatusCode::CONFLICT,
                axum::Json(json!({"error": {"message": "Server is already powered OFF."}})),
            )
                .into_response()
        }
        Fault::OnRefusedTwice if !off && b.on_refusals.fetch_add(1, Ordering::SeqCst) < 2 => (
            StatusCode::CONFLICT,
            axum::Json(json!({"error": {"message": "busy after power off"}})),
        )
            .into_response(),
        Fault::TaskFails => (
            StatusCode::ACCEPTED,
            [(header::LOCATION, "/redfish/v1/TaskService/TaskMonitors/7")],
        )
            .into_response(),
        Fault::RejectStaysOn => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "InvalidOperationForSystemState"}})),
        )
            .into_response(),
        _ => {
            *b.power.lock().unwrap() = if off { "Off" } else { "On" };
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

/// A TLS listener for axum: handshakes that fail are dropped, the next is accepted.
struct TlsListener {
    tcp: TcpListener,
    tls: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(s) = self.tls.accept(tcp).await {
                return (s, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A running fault server; aborted when dropped.
pub struct FaultServer {
    pub url: url::Url,
    pub pin: String,
    bmc: Arc<Bmc>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(fault: Fault) -> FaultServer {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let der = ck.cert.der().clone();
    let pin = qfence_controllers::tls::fingerprint(&der);
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der], key)
    .unwrap();
    let bmc = Arc::new(Bmc {
        fault,
        power: Mutex::new(if fault == Fault::OnRefusedTwice {
            "Off"
        } else {
            "On"
        }),
        on_refusals: AtomicU32::new(0),
        sessions_made: AtomicU32::new(0),
        sessions_deleted: AtomicU32::new(0),
        system_reads: AtomicU32::new(0),
    });
    let app = Router::new()
        .route("/redfish/v1/", get(root))
        .route("/redfish/v1/SessionService/Sessions", post(login))
        .route("/redfish/v1/SessionService/Sessions/{id}", delete(logout))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/TaskService/TaskMonitors/7", get(task_monitor))
        .route("/redfish/v1/AccountService", get(account_service))
        .route(
            "/redfish/v1/AccountService/PrivilegeMap",
            get(privilege_map),
        )
        .route("/redfish/v1/AccountService/Accounts", get(accounts))
        .route("/redfish/v1/AccountService/Accounts/{n}", get(account))
        .route("/redfish/v1/AccountService/Roles/{r}", get(role))
        .route("/redfish/v1/Systems/1", get(system))
        .route(
            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .with_state(bmc.clone());
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let listener = TlsListener {
        tcp,
        tls: TlsAcceptor::from(Arc::new(cfg)),
    };
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    FaultServer {
        url: url::Url::parse(&format!("https://127.0.0.1:{port}")).unwrap(),
        pin,
        bmc,
        task,
    }
}

fn driver(s: &FaultServer, auth: RedfishAuth) -> RedfishDriver {
    RedfishDriver::new(
        ControllerId::new("bmc-fault").unwrap(),
        &s.url,
        "admin",
        auth,
        &TlsTrust::Pin(s.pin.clone()),
        Some(Secret::new("pw".into())),
    )
    .unwrap()
}

const DEADLINE: Duration = Duration::from_secs(3);

/// Checks the system under a fault: UNKNOWN, an error naming the controller and the call,
/// in time.
async fn unknown_under(fault: Fault, expect: &str) -> qfence_controllers::DriverError {
    let s = serve(fault).await;
    let d = driver(&s, RedfishAuth::Basic);
    let t = Instant::now();
    let r = d.check(&ctx(DEADLINE), &target("power.off", "1")).await;
    let took = t.elapsed();
    assert!(
        took < DEADLINE + Duration::from_millis(500),
        "{fault:?}: took {took:?}"
    );
    assert_eq!(fence_verdict(&r), Verdict::Unknown, "{fault:?}: {r:?}");
    let e = r.unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("bmc-fault: "),
        "{fault:?}: names the controller: {text}"
    );
    assert!(
        text.contains("/redfish/v1/Systems/1") || text.contains("check"),
        "{fault:?}: names the call: {text}"
    );
    assert!(text.contains(expect), "{fault:?}: {text}");
    e
}

#[tokio::test]
async fn invalid_json_is_unknown() {
    let e = unknown_under(Fault::InvalidJson, "not valid JSON").await;
    assert_eq!(e.kind, ErrorKind::Protocol);
}

#[tokio::test]
async fn a_huge_body_is_cut_off_and_unknown() {
    let e = unknown_under(Fault::HugeBody, "limit").await;
    assert_eq!(e.kind, ErrorKind::Protocol);
}

#[tokio::test]
async fn a_slow_drip_is_stopped_at_the_deadline() {
    let e = unknown_under(Fault::SlowDrip, "").await;
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_stopped_at_the_deadline() {
    let e = unknown_under(Fault::Hang, "").await;
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
}

#[tokio::test]
async fn a_redirect_to_another_host_is_refused() {
    unknown_under(Fault::RedirectElsewhere, "another origin").await;
}

#[tokio::test]
async fn a_5xx_storm_is_retried_a_few_times_then_unknown() {
    let s = serve(Fault::Storm503).await;
    let d = driver(&s, RedfishAuth::Basic);
    let r = d.check(&ctx(DEADLINE), &target("power.off", "1")).await;
    assert_eq!(fence_verdict(&r), Verdict::Unknown);
    let e = r.unwrap_err();
    assert!(e.message.contains("503"), "{e}");
    let reads = s.bmc.system_reads.load(Ordering::SeqCst);
    assert!((2..=6).contains(&reads), "bounded retries, got {reads}");
}

#[tokio::test]
async fn a_tls_failure_is_unknown_and_names_the_certificate() {
    let s = serve(Fault::None).await;
    let d = RedfishDriver::new(
        ControllerId::new("bmc-fault").unwrap(),
        &s.url,
        "admin",
        RedfishAuth::Basic,
        &TlsTrust::SystemRoots,
        Some(Secret::new("pw".into())),
    )
    .unwrap();
    let r = d.check(&ctx(DEADLINE), &target("power.off", "1")).await;
    assert_eq!(fence_verdict(&r), Verdict::Unknown);
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable);
    assert!(e.message.contains(&s.pin), "{e}");
}

#[tokio::test]
async fn a_409_on_power_off_is_answered_by_reading_the_power_state() {
    let s = serve(Fault::ConflictButOff).await;
    let d = driver(&s, RedfishAuth::Basic);
    let r = d
        .perform(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap();
    assert!(
        r.holds && r.detail.contains("PowerState=Off"),
        "{}",
        r.detail
    );
}

#[tokio::test]
async fn a_400_on_power_off_with_the_system_still_on_is_a_refusal_with_the_reading() {
    let s = serve(Fault::RejectStaysOn).await;
    let d = driver(&s, RedfishAuth::Basic);
    let e = d
        .perform(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(!e.state_unknown, "the read-back says it is on");
    assert!(
        e.message.contains("PowerState=On") && e.message.contains("InvalidOperationForSystemState"),
        "{e}"
    );
    let c = d.check(&ctx(DEADLINE), &target("power.off", "1")).await;
    assert_eq!(fence_verdict(&c), Verdict::Failed);
}

/// One session serves every call and is kept between them (BMCs have few slots: a session
/// per call ran them out at 1,000 plans); `close` deletes it, also after a call that timed
/// out, and so does dropping the driver. (Before, each call made and deleted its own.)
#[tokio::test]
async fn one_session_serves_every_call_and_is_deleted_on_close_even_after_a_timeout() {
    let s = serve(Fault::None).await;
    let d = driver(&s, RedfishAuth::Session);
    let r = d
        .perform(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap();
    assert!(r.holds);
    d.check(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap();
    assert_eq!(s.bmc.sessions_made.load(Ordering::SeqCst), 1);
    assert_eq!(s.bmc.sessions_deleted.load(Ordering::SeqCst), 0);
    d.close().await;
    assert_eq!(s.bmc.sessions_deleted.load(Ordering::SeqCst), 1);

    let s = serve(Fault::Hang).await;
    let d = driver(&s, RedfishAuth::Session);
    let e = d
        .check(&ctx(Duration::from_secs(1)), &target("power.off", "1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert_eq!(s.bmc.sessions_made.load(Ordering::SeqCst), 1);
    assert!(d.has_session(), "the session was lost track of");
    d.close().await;
    assert_eq!(
        s.bmc.sessions_deleted.load(Ordering::SeqCst),
        1,
        "the session leaked"
    );

    let s = serve(Fault::None).await;
    let d = driver(&s, RedfishAuth::Session);
    d.check(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap();
    drop(d);
    let until = Instant::now() + Duration::from_secs(3);
    while s.bmc.sessions_deleted.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        s.bmc.sessions_deleted.load(Ordering::SeqCst),
        1,
        "the dropped driver's session leaked"
    );
}

#[tokio::test]
async fn the_fence_privilege_is_proven_by_the_services_own_map_inferred_without_it_failed_for_read_only()
 {
    use qfence_model::Grade;
    for (fault, want, words) in [
        (
            Fault::None,
            Grade::Proven,
            "privilege map says resetting a system needs ConfigureComponents",
        ),
        (
            Fault::NoPrivilegeMap,
            Grade::Inferred,
            "DMTF default privilege map",
        ),
        (
            Fault::ReadOnlyRole,
            Grade::Failed,
            "role ReadOnly has Login, ConfigureSelf",
        ),
    ] {
        let s = serve(fault).await;
        let d = driver(&s, RedfishAuth::Session);
        let p = d.probe(&ctx(DEADLINE)).await.unwrap();
        d.close().await;
        let g = p
            .grades
            .iter()
            .find(|g| g.capability == "power.off")
            .unwrap();
        assert_eq!(g.grade, want, "{fault:?}: {}", g.reason);
        assert!(g.reason.contains(words), "{fault:?}: {}", g.reason);
        assert_eq!(
            s.bmc.sessions_made.load(Ordering::SeqCst),
            s.bmc.sessions_deleted.load(Ordering::SeqCst)
        );
        assert_eq!(*s.bmc.power.lock().unwrap(), "On", "a probe never fences");
    }
}

#[tokio::test]
async fn an_unfence_refused_right_after_a_fence_is_retried_within_its_deadline() {
    let s = serve(Fault::OnRefusedTwice).await;
    let d = driver(&s, RedfishAuth::Basic);
    let r = d
        .undo(&ctx(Duration::from_secs(10)), &target("power.off", "1"))
        .await
        .unwrap();
    assert!(
        !r.holds && r.detail.contains("PowerState=On"),
        "{}",
        r.detail
    );
    assert_eq!(s.bmc.on_refusals.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_account_that_must_change_its_password_is_a_configuration_error() {
    let s = serve(Fault::PasswordChangeRequired).await;
    let d = driver(&s, RedfishAuth::Session);
    let e = d
        .check(&ctx(DEADLINE), &target("power.off", "1"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth);
    assert!(e.message.contains("must change its password"), "{e}");
    assert_eq!(
        s.bmc.sessions_deleted.load(Ordering::SeqCst),
        1,
        "the session was deleted"
    );
}

#[tokio::test]
async fn a_failed_reset_task_is_reported_at_once_with_the_reading() {
    let s = serve(Fault::TaskFails).await;
    let d = driver(&s, RedfishAuth::Basic);
    let t = Instant::now();
    let e = d
        .perform(&ctx(Duration::from_secs(10)), &target("power.off", "1"))
        .await
        .unwrap_err();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "waited for the deadline: {:?}",
        t.elapsed()
    );
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(
        e.message.contains("power controller fault") && e.message.contains("PowerState=On"),
        "{e}"
    );
}
