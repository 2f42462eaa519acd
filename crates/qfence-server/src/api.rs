//! The HTTP API: routes, authentication by role, body and query parsing into [`ApiError`]s,
//! and the OpenAPI document built from the same handlers.
//!
//! Every call but `/health`, `/leader` and `/openapi.json` needs a bearer token; the role
//! extractors ([`Viewer`], [`Operator`], [`Admin`]) run before the body is read, so a call
//! without the right token is refused before anything else is looked at. Plans and
//! controllers are validated with the configuration file's own validation
//! ([`qfence_model::config::plan_api`]) before the backend sees them.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use qfence_model::config::plan_api;
use qfence_model::{ControllerId, PlanId, SiteId};

mod instance_ha;
mod responses;

use crate::error::ApiError;
use qfence_runtime::auth::{Access, Caller, TokenStore};
use qfence_runtime::backend::{Backend, CheckedController, CheckedPlan};
use qfence_runtime::dto::*;
use qfence_runtime::events::{EventPage, EventQuery};
use qfence_runtime::metrics::Metrics;
use qfence_runtime::timeline::PlanTimeline;

/// The largest request body accepted, in bytes. A plan is a few kilobytes.
pub const BODY_LIMIT: usize = 64 * 1024;

/// How the API is run.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The deadline for one call, after which it is answered `timeout` (503).
    pub call_timeout: Duration,
    /// Cancelled when the server stops: the console's live streams (server-sent events) end,
    /// so a graceful shutdown does not wait for browsers to close them.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(30),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) tokens: Arc<TokenStore>,
    metrics: Metrics,
    openapi: Arc<String>,
    /// Ends the console's live streams (see [`ApiConfig::shutdown`]).
    pub(crate) live_stop: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

/// The whole API, ready to serve: routes, `/openapi.json`, fallbacks and the middleware
/// (sensitive headers, request ids, tracing, panics as 500s, the call deadline, the body limit).
pub fn router(
    backend: Arc<dyn Backend>,
    tokens: TokenStore,
    metrics: Metrics,
    config: &ApiConfig,
) -> Router {
    let (routes, doc) = api_router().split_for_parts();
    let openapi = Arc::new(
        doc.to_pretty_json()
            .expect("the OpenAPI document serialises"),
    );
    let state = AppState {
        backend,
        tokens: Arc::new(tokens),
        metrics,
        openapi,
        live_stop: config.shutdown.clone(),
    };
    let timeout = config.call_timeout;
    routes
        .route("/openapi.json", axum::routing::get(serve_openapi))
        // The web console: the same backend, rendered as HTML; not part of the OpenAPI document.
        .merge(crate::console::routes())
        .fallback(|| async {
            ApiError::not_found("no such path; the API is described at /openapi.json")
        })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(state)
        .layer(
            ServiceBuilder::new()
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                ]))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(TraceLayer::new_for_http())
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(CatchPanicLayer::custom(panic_response))
                .layer(axum::middleware::from_fn(
                    move |req: Request, next: Next| deadline(timeout, req, next),
                ))
                .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT)),
        )
}

/// The OpenAPI document the routes describe.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().into_openapi()
}

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(leader))
        .routes(routes!(metrics))
        .routes(routes!(whoami))
        .routes(routes!(status))
        .routes(routes!(list_plans, create_plan))
        .routes(routes!(get_plan, delete_plan))
        .routes(routes!(plan_timeline))
        .routes(routes!(stage_plan, discard_staged))
        .routes(routes!(apply_staged))
        .routes(routes!(dry_run))
        .routes(routes!(switchover))
        .routes(routes!(failover))
        .routes(routes!(confirm_fenced))
        .routes(routes!(rejoin))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(maintenance))
        .routes(routes!(secrets))
        .routes(routes!(list_controllers, register_controller))
        .routes(routes!(test_controller))
        .routes(routes!(probe_controller))
        .routes(routes!(discover))
        .routes(routes!(events))
        .routes(routes!(orchestrators))
        .routes(routes!(instance_ha::instance_ha_status))
        .routes(routes!(instance_ha::instance_ha_hosts))
        .routes(routes!(instance_ha::instance_ha_evacuations))
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "qfence API",
        description = "Site-aware fencing and failover orchestrator. Every call but /health, \
            /leader and /openapi.json needs `Authorization: Bearer <token>`; the token's role \
            (viewer < operator < admin) decides what it may do. Every error is an ErrorBody \
            with a stable `code`."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "health", description = "For load balancers and monitoring"),
        (name = "status", description = "What every plan and site is doing"),
        (name = "plans", description = "Plans: create, staged change applied with compare-and-set, delete, dry run"),
        (name = "operations", description = "Switchover, failover, confirm fenced, pause and resume"),
        (name = "controllers", description = "Controllers: register, test, list with grades"),
        (name = "events", description = "The hash-chained event log"),
        (name = "cluster", description = "The orchestrators"),
        (name = "instance-ha", description = "Instance HA: compute hosts, evacuations, the last decision"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

async fn deadline(timeout: Duration, req: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::timeout().into_response(),
    }
}

fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "A request handler panicked: this is a bug, please report it");
    ApiError::internal("the server hit a bug handling this call; it was logged").into_response()
}

async fn serve_openapi(State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        s.openapi.as_str().to_owned(),
    )
        .into_response()
}

// ---- extractors ----

fn authenticate(parts: &Parts, tokens: &TokenStore) -> Result<Caller, ApiError> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::unauthorized(
            "missing token: send `Authorization: Bearer <token>`",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not text"))?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(ApiError::unauthorized("the bearer token is empty"));
    }
    tokens
        .authenticate(token)
        .ok_or_else(|| ApiError::unauthorized("the token is not known"))
}

macro_rules! role_extractor {
    ($(#[$doc:meta])* $name:ident, $access:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub Caller);

        impl FromRequestParts<AppState> for $name {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut Parts,
                state: &AppState,
            ) -> Result<Self, ApiError> {
                let caller = authenticate(parts, &state.tokens)?;
                if caller.access < $access {
                    return Err(ApiError::forbidden(caller.access, $access));
                }
                Ok($name(caller))
            }
        }
    };
}

role_extractor!(
    /// A caller with at least the viewer role.
    Viewer,
    Access::Viewer
);
role_extractor!(
    /// A caller with at least the operator role.
    Operator,
    Access::Operator
);
role_extractor!(
    /// A caller with the admin role.
    Admin,
    Access::Admin
);

/// A JSON body whose rejections are [`ApiError`]s. The body must be a JSON object: serde
/// would otherwise read a struct from an array (`[1]`), which no client means.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::unsupported_media_type());
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::body_too_large()
                } else {
                    ApiError::invalid_json(format!("the body could not be read: {}", r.body_text()))
                }
            })?;
        // Syntax first, whole: a typed parse would report an unknown field before a syntax
        // error further on, and malformed JSON should say so.
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            return Err(ApiError::invalid_json(format!(
                "the body is not valid JSON: {e}"
            )));
        }
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid_body("the body must be a JSON object"));
        }
        match Json::<T>::from_bytes(&bytes) {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(r.into()),
        }
    }
}

/// `application/json`, or any `application/*+json`, parameters allowed.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A query string whose rejections are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(r) => Err(r.into()),
        }
    }
}

/// Path parameters whose rejections are [`ApiError`]s.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(r) => Err(r.into()),
        }
    }
}

/// The path parameter of a call on one plan, declared once for the document; the handler
/// reads it with [`ApiPath`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the document only
struct PlanPath {
    /// The plan's name
    #[param(example = "erp-db")]
    plan: String,
}

/// The path parameters of a call on one site of a plan, as [`PlanPath`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the document only
struct PlanSitePath {
    /// The plan's name
    #[param(example = "erp-db")]
    plan: String,
    /// The site's name
    #[param(example = "dc2")]
    site: String,
}

/// A name from the path: one that is not a valid name names nothing.
fn plan_id(name: &str) -> Result<PlanId, ApiError> {
    PlanId::new(name).map_err(|_| ApiError::not_found(format!("plan {name:?} does not exist")))
}

fn site_id(name: &str) -> Result<SiteId, ApiError> {
    SiteId::new(name).map_err(|_| ApiError::not_found(format!("site {name:?} does not exist")))
}

fn controller_id(name: &str) -> Result<ControllerId, ApiError> {
    ControllerId::new(name)
        .map_err(|_| ApiError::not_found(format!("controller {name:?} does not exist")))
}

async fn check_plan(
    state: &AppState,
    name: &str,
    spec: serde_json::Value,
) -> Result<CheckedPlan, ApiError> {
    let base = state.backend.config_source().await?;
    match plan_api::check_plan(&base, name, &spec) {
        Ok(checked) => {
            let id = PlanId::new(name)
                .map_err(|e| ApiError::invalid_body(format!("{name:?} is not a plan name: {e}")))?;
            Ok(CheckedPlan {
                name: id,
                spec,
                config: checked.value,
                warnings: checked.warnings,
            })
        }
        Err(issues) => {
            let errors = issues.iter().filter(|i| i.is_error()).count();
            Err(ApiError::validation(
                format!("plan {name:?} is not valid: {errors} error(s); nothing was changed"),
                &issues,
            ))
        }
    }
}

// ---- handlers ----

/// Whether the process serves requests. No token needed.
#[utoipa::path(get, path = "/health", tag = "health",
    responses((status = 200, description = "Serving", body = Health)))]
async fn health(State(s): State<AppState>) -> Json<Health> {
    let l = s.backend.leader().await;
    Json(Health {
        status: "ok".to_owned(),
        orchestrator: l.orchestrator,
    })
}

/// 200 on the leader, 503 elsewhere: point a load balancer's health check here to reach the
/// leader. No token needed.
#[utoipa::path(get, path = "/leader", tag = "health",
    responses(
        (status = 200, description = "This orchestrator leads", body = LeaderInfo),
        (status = 503, description = "This orchestrator does not lead", body = LeaderInfo)))]
async fn leader(State(s): State<AppState>) -> (StatusCode, Json<LeaderInfo>) {
    let l = s.backend.leader().await;
    let status = if l.is_self {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(l))
}

/// Prometheus metrics, text format. Viewer.
#[utoipa::path(get, path = "/metrics", tag = "health", security(("bearer" = [])),
    responses(
        (status = 200, description = "Prometheus text format", body = String, content_type = "text/plain"),
        responses::Unauthorized,
        responses::Forbidden))]
async fn metrics(_: Viewer, State(s): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, qfence_runtime::metrics::CONTENT_TYPE)],
        s.metrics.render(),
    )
        .into_response()
}

/// The caller's token name and role. Viewer.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "status", security(("bearer" = [])),
    responses(
        (status = 200, body = WhoAmI),
        responses::Unauthorized))]
async fn whoami(Viewer(c): Viewer) -> Json<WhoAmI> {
    Json(WhoAmI {
        name: c.name,
        role: c.access,
    })
}

/// Every plan and site: verdicts, owner, generation, last reason. Viewer.
#[utoipa::path(get, path = "/api/v1/status", tag = "status", security(("bearer" = [])),
    responses(
        (status = 200, body = StatusResponse),
        responses::Viewer))]
async fn status(_: Viewer, State(s): State<AppState>) -> Result<Json<StatusResponse>, ApiError> {
    Ok(Json(s.backend.status().await?))
}

/// Every plan. Viewer.
#[utoipa::path(get, path = "/api/v1/plans", tag = "plans", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<PlanView>),
        responses::Viewer))]
async fn list_plans(_: Viewer, State(s): State<AppState>) -> Result<Json<Vec<PlanView>>, ApiError> {
    Ok(Json(s.backend.plans().await?))
}

/// Creates a plan at generation 1, validated as the configuration file would be. Admin.
#[utoipa::path(post, path = "/api/v1/plans", tag = "plans", security(("bearer" = [])),
    request_body = CreatePlan,
    responses(
        (status = 201, body = PlanView),
        responses::Writer,
        responses::JsonBody,
        (status = 409, description = "The name is taken", body = ErrorBody),
        (status = 422, description = "Not valid: every issue with its path", body = ErrorBody)))]
async fn create_plan(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiJson(req): ApiJson<CreatePlan>,
) -> Result<(StatusCode, Json<PlanView>), ApiError> {
    let plan = check_plan(&s, &req.name, req.spec).await?;
    Ok((
        StatusCode::CREATED,
        Json(s.backend.create_plan(&c, plan).await?),
    ))
}

/// One plan, with its staged change if any. Viewer.
#[utoipa::path(get, path = "/api/v1/plans/{plan}", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    responses(
        (status = 200, body = PlanView),
        responses::Viewer,
        responses::NotFound))]
async fn get_plan(
    _: Viewer,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(s.backend.plan(&plan_id(&plan)?).await?))
}

/// The plan's moves (failovers, switchovers), each step with its start, end and duration and
/// the commands beneath it, read from this orchestrator's event log (its last 20 000 records).
/// Viewer.
#[utoipa::path(get, path = "/api/v1/plans/{plan}/timeline", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    responses(
        (status = 200, body = PlanTimeline),
        responses::Viewer,
        responses::NotFound))]
async fn plan_timeline(
    _: Viewer,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
) -> Result<Json<PlanTimeline>, ApiError> {
    let id = plan_id(&plan)?;
    // An unknown plan is a 404, not an empty timeline.
    s.backend.plan(&id).await?;
    Ok(Json(
        crate::records::plan_timeline(s.backend.as_ref(), id.as_str()).await?,
    ))
}

/// Deletes a plan if it is still at `expected_generation`. Admin.
#[utoipa::path(delete, path = "/api/v1/plans/{plan}", tag = "plans", security(("bearer" = [])),
    params(PlanPath, DeletePlanQuery),
    responses(
        (status = 204, description = "Deleted"),
        responses::Writer,
        responses::NotFound,
        responses::BadQuery,
        (status = 409, description = "Stale generation: the body has the current one", body = ErrorBody)))]
async fn delete_plan(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiQuery(q): ApiQuery<DeletePlanQuery>,
) -> Result<StatusCode, ApiError> {
    s.backend
        .delete_plan(&c, &plan_id(&plan)?, q.expected_generation)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Stages a change of the plan, validated; nothing is in force until it is applied. Admin.
#[utoipa::path(put, path = "/api/v1/plans/{plan}/staged", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    request_body = StagePlan,
    responses(
        (status = 200, body = PlanView),
        responses::PlanWrite))]
async fn stage_plan(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<StagePlan>,
) -> Result<Json<PlanView>, ApiError> {
    let id = plan_id(&plan)?;
    // 404 before validation: a change to a plan that does not exist is not a validation issue.
    s.backend.plan(&id).await?;
    let checked = check_plan(&s, &plan, req.spec).await?;
    Ok(Json(s.backend.stage_plan(&c, checked).await?))
}

/// Drops the staged change. Admin.
#[utoipa::path(delete, path = "/api/v1/plans/{plan}/staged", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    responses(
        (status = 200, body = PlanView),
        responses::Writer,
        responses::NotFound,
        (status = 409, description = "Nothing is staged", body = ErrorBody)))]
async fn discard_staged(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(s.backend.discard_staged(&c, &plan_id(&plan)?).await?))
}

/// Applies the staged change if the plan is still at `expected_generation`
/// (compare-and-set). Admin.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/apply", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    request_body = ApplyStaged,
    responses(
        (status = 200, body = PlanView),
        responses::PlanWrite,
        (status = 409, description = "Stale generation (with the current one), or nothing staged", body = ErrorBody)))]
async fn apply_staged(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<ApplyStaged>,
) -> Result<Json<PlanView>, ApiError> {
    Ok(Json(
        s.backend
            .apply_staged(&c, &plan_id(&plan)?, req.expected_generation)
            .await?,
    ))
}

/// What would happen: the next cycle, applying the staged change, a switchover or a
/// failover. Changes nothing. Viewer.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/dry-run", tag = "plans", security(("bearer" = [])),
    params(PlanPath),
    request_body = DryRun,
    responses(
        (status = 200, body = DryRunResult),
        responses::Viewer,
        responses::NotFound,
        responses::JsonBody,
        responses::Conflict))]
async fn dry_run(
    _: Viewer,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<DryRun>,
) -> Result<Json<DryRunResult>, ApiError> {
    Ok(Json(s.backend.dry_run(&plan_id(&plan)?, &req).await?))
}

/// Moves ownership to `target`, in order, if the plan is still at `expected_generation`.
/// Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/switchover", tag = "operations", security(("bearer" = [])),
    params(PlanPath),
    request_body = SwitchoverRequest,
    responses(
        (status = 202, body = OperationAccepted),
        responses::PlanWrite,
        responses::RefusedForSafety))]
async fn switchover(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<SwitchoverRequest>,
) -> Result<(StatusCode, Json<OperationAccepted>), ApiError> {
    site_name_in_body(&req.target)?;
    let r = s.backend.switchover(&c, &plan_id(&plan)?, &req).await?;
    Ok((StatusCode::ACCEPTED, Json(r)))
}

/// Fences the owner and promotes `target` (or the first by priority), if the plan is still
/// at `expected_generation`. Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/failover", tag = "operations", security(("bearer" = [])),
    params(PlanPath),
    request_body = FailoverRequest,
    responses(
        (status = 202, body = OperationAccepted),
        responses::PlanWrite,
        responses::RefusedForSafety))]
async fn failover(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<FailoverRequest>,
) -> Result<(StatusCode, Json<OperationAccepted>), ApiError> {
    if let Some(t) = &req.target {
        site_name_in_body(t)?;
    }
    let r = s.backend.failover(&c, &plan_id(&plan)?, &req).await?;
    Ok((StatusCode::ACCEPTED, Json(r)))
}

/// The operator vouches that `site` is stopped, when no fence can show it. Recorded with the
/// reason. Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/sites/{site}/confirm-fenced", tag = "operations",
    security(("bearer" = [])),
    params(PlanSitePath),
    request_body = ConfirmFencedRequest,
    responses(
        (status = 200, body = OperationAccepted),
        responses::PlanWrite,
        responses::RefusedSiteOwns))]
async fn confirm_fenced(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath((plan, site)): ApiPath<(String, String)>,
    ApiJson(req): ApiJson<ConfirmFencedRequest>,
) -> Result<Json<OperationAccepted>, ApiError> {
    if req.reason.trim().is_empty() {
        return Err(ApiError::invalid_body(
            "reason must say how the site is known to be stopped",
        ));
    }
    let (plan, site) = (plan_id(&plan)?, site_id(&site)?);
    Ok(Json(
        s.backend.confirm_fenced(&c, &plan, &site, &req).await?,
    ))
}

/// Lets `site`, an old owner a failover gave up, rejoin as a replica of the owner (its
/// `rejoin` bindings: pg_rewind, or a re-clone when that fails). Refused at once for a site
/// that does not wait to rejoin; the next decision takes it or says why not. Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/sites/{site}/rejoin", tag = "operations",
    security(("bearer" = [])),
    params(PlanSitePath),
    request_body = RejoinRequest,
    responses(
        (status = 200, body = OperationAccepted),
        responses::PlanWrite,
        responses::RefusedSiteOwns))]
async fn rejoin(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath((plan, site)): ApiPath<(String, String)>,
    ApiJson(req): ApiJson<RejoinRequest>,
) -> Result<Json<OperationAccepted>, ApiError> {
    let (plan, site) = (plan_id(&plan)?, site_id(&site)?);
    Ok(Json(s.backend.rejoin(&c, &plan, &site, &req).await?))
}

/// Pauses automatic actions on the plan (operator actions still work). Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/pause", tag = "operations", security(("bearer" = [])),
    params(PlanPath),
    request_body = PauseRequest,
    responses(
        (status = 200, body = OperationAccepted),
        responses::PlanWrite,
        responses::Conflict))]
async fn pause(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<PauseRequest>,
) -> Result<Json<OperationAccepted>, ApiError> {
    Ok(Json(s.backend.pause(&c, &plan_id(&plan)?, &req).await?))
}

/// Resumes automatic actions on the plan. Operator.
#[utoipa::path(post, path = "/api/v1/plans/{plan}/resume", tag = "operations", security(("bearer" = [])),
    params(PlanPath),
    request_body = PauseRequest,
    responses(
        (status = 200, body = OperationAccepted),
        responses::PlanWrite,
        responses::Conflict))]
async fn resume(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath(plan): ApiPath<String>,
    ApiJson(req): ApiJson<PauseRequest>,
) -> Result<Json<OperationAccepted>, ApiError> {
    Ok(Json(s.backend.resume(&c, &plan_id(&plan)?, &req).await?))
}

/// Takes a site in or out of maintenance, if the plan is still at `expected_generation`.
/// Operator.
#[utoipa::path(put, path = "/api/v1/plans/{plan}/sites/{site}/maintenance", tag = "operations",
    security(("bearer" = [])),
    params(PlanSitePath),
    request_body = MaintenanceRequest,
    responses(
        (status = 200, body = OperationAccepted),
        responses::PlanWrite,
        responses::RefusedSiteOwns))]
async fn maintenance(
    Operator(c): Operator,
    State(s): State<AppState>,
    ApiPath((plan, site)): ApiPath<(String, String)>,
    ApiJson(req): ApiJson<MaintenanceRequest>,
) -> Result<Json<OperationAccepted>, ApiError> {
    let (plan, site) = (plan_id(&plan)?, site_id(&site)?);
    Ok(Json(
        s.backend.set_maintenance(&c, &plan, &site, &req).await?,
    ))
}

/// The secret references controllers name, and who names them; never a secret. Admin.
#[utoipa::path(get, path = "/api/v1/secrets", tag = "controllers", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<SecretRefView>),
        responses::Writer))]
async fn secrets(
    _: Admin,
    State(s): State<AppState>,
) -> Result<Json<Vec<SecretRefView>>, ApiError> {
    Ok(Json(s.backend.secrets().await?))
}

/// Every controller, with the grades of its last test. Viewer.
#[utoipa::path(get, path = "/api/v1/controllers", tag = "controllers", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<ControllerView>),
        responses::Viewer))]
async fn list_controllers(
    _: Viewer,
    State(s): State<AppState>,
) -> Result<Json<Vec<ControllerView>>, ApiError> {
    Ok(Json(s.backend.controllers().await?))
}

/// Registers a controller, validated as the configuration file would be; its credential by
/// reference only. Admin.
#[utoipa::path(post, path = "/api/v1/controllers", tag = "controllers", security(("bearer" = [])),
    request_body = RegisterController,
    responses(
        (status = 201, body = ControllerView),
        responses::Writer,
        responses::JsonBody,
        (status = 409, description = "The name is taken", body = ErrorBody)))]
async fn register_controller(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiJson(req): ApiJson<RegisterController>,
) -> Result<(StatusCode, Json<ControllerView>), ApiError> {
    let checked = check_controller(&s, req).await?;
    let view = s.backend.register_controller(&c, checked).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Validates a controller as the configuration file would be.
async fn check_controller(
    state: &AppState,
    req: RegisterController,
) -> Result<CheckedController, ApiError> {
    let base = state.backend.config_source().await?;
    let checked = plan_api::check_controller(&base, &req.name, &req.spec).map_err(|issues| {
        let errors = issues.iter().filter(|i| i.is_error()).count();
        ApiError::validation(
            format!(
                "controller {:?} is not valid: {errors} error(s); nothing was changed",
                req.name
            ),
            &issues,
        )
    })?;
    let name = ControllerId::new(req.name.as_str())
        .map_err(|e| ApiError::invalid_body(format!("{:?} is not a name: {e}", req.name)))?;
    Ok(CheckedController {
        name,
        spec: req.spec,
        config: checked.value,
        warnings: checked.warnings,
    })
}

/// Runs the registration steps on a controller that is not registered yet (same body as
/// registering): configuration, secret, connectivity from a site allowed to call it
/// (identity, TLS certificate fingerprint to pin) and each capability graded. Registers
/// nothing and acts on no target. Admin.
#[utoipa::path(post, path = "/api/v1/controllers/probe", tag = "controllers",
    security(("bearer" = [])),
    request_body = RegisterController,
    responses(
        (status = 200, description = "The steps ran; whether they passed is in the body", body = ControllerTest),
        responses::Writer,
        responses::JsonBody,
        (status = 409, description = "The name is registered: test that controller instead", body = ErrorBody)))]
async fn probe_controller(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiJson(req): ApiJson<RegisterController>,
) -> Result<Json<ControllerTest>, ApiError> {
    let checked = check_controller(&s, req).await?;
    Ok(Json(s.backend.probe_controller(&c, checked).await?))
}

/// What the controller's capabilities can act on (VMs, hosts, addresses), as its driver
/// discovers them from a site allowed to call it: the values a binding's `resource` takes.
/// Read-only. Viewer.
#[utoipa::path(get, path = "/api/v1/controllers/{controller}/resources", tag = "controllers",
    security(("bearer" = [])),
    params(("controller" = String, Path, description = "The controller's name", example = "pve-dc1")),
    responses(
        (status = 200, body = Vec<DiscoveredResource>),
        responses::Unauthorized,
        responses::NotFound,
        (status = 503, description = "The controller could not be reached or listed", body = ErrorBody)))]
async fn discover(
    _: Viewer,
    State(s): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<Vec<DiscoveredResource>>, ApiError> {
    Ok(Json(s.backend.discover(&controller_id(&name)?).await?))
}

/// Probes a controller without side effects on its targets and grades its capabilities.
/// Admin.
#[utoipa::path(post, path = "/api/v1/controllers/{controller}/test", tag = "controllers",
    security(("bearer" = [])),
    params(("controller" = String, Path, description = "The controller's name", example = "bmc-dc1")),
    responses(
        (status = 200, body = ControllerTest),
        responses::Writer,
        responses::NotFound))]
async fn test_controller(
    Admin(c): Admin,
    State(s): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ControllerTest>, ApiError> {
    Ok(Json(
        s.backend
            .test_controller(&c, &controller_id(&name)?)
            .await?,
    ))
}

/// One page of the event log, oldest first; filter by kind, plan, site. Viewer.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", security(("bearer" = [])),
    params(EventQuery),
    responses(
        (status = 200, body = EventPage),
        responses::Viewer,
        responses::BadQuery))]
async fn events(
    _: Viewer,
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Json<EventPage>, ApiError> {
    Ok(Json(s.backend.events(&q).await?))
}

/// The orchestrators of the cluster. Viewer.
#[utoipa::path(get, path = "/api/v1/orchestrators", tag = "cluster", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<OrchestratorView>),
        responses::Viewer))]
async fn orchestrators(
    _: Viewer,
    State(s): State<AppState>,
) -> Result<Json<Vec<OrchestratorView>>, ApiError> {
    Ok(Json(s.backend.orchestrators().await?))
}

/// A site named in a body: a malformed name is a 422 (the body is wrong), an unknown one is
/// for the backend to refuse.
fn site_name_in_body(name: &str) -> Result<(), ApiError> {
    SiteId::new(name)
        .map(|_| ())
        .map_err(|e| ApiError::invalid_body(format!("target {name:?} is not a site name: {e}")))
}
