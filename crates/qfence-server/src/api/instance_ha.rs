//! Instance HA's read-only endpoints: each cloud with its last decision, its hosts and the
//! evacuations (ADR 0025). The hosts being processed come from the replicated state, so any
//! orchestrator answers; the last decision and the hosts Nova reported, from the leader.

use axum::Json;
use axum::extract::State;

use super::{AppState, Viewer, responses};
use crate::error::ApiError;
use qfence_runtime::dto::{EvacuationStatus, HostStatus, InstanceHaStatus};

/// Every Instance HA cloud: its last decision's sentence, its hosts, its evacuations and the
/// gates closed. Viewer.
#[utoipa::path(get, path = "/api/v1/instance-ha", tag = "instance-ha", security(("bearer" = [])),
    responses(
        (status = 200, body = InstanceHaStatus),
        responses::Viewer))]
pub(super) async fn instance_ha_status(
    _: Viewer,
    State(s): State<AppState>,
) -> Result<Json<InstanceHaStatus>, ApiError> {
    Ok(Json(s.backend.instance_ha().await?))
}

/// Every cloud's compute hosts with their state (`up`, `failed`, `disabled` or their
/// incident's phase). Viewer.
#[utoipa::path(get, path = "/api/v1/instance-ha/hosts", tag = "instance-ha", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<HostStatus>),
        responses::Viewer))]
pub(super) async fn instance_ha_hosts(
    _: Viewer,
    State(s): State<AppState>,
) -> Result<Json<Vec<HostStatus>>, ApiError> {
    let status = s.backend.instance_ha().await?;
    Ok(Json(
        status.clouds.into_iter().flat_map(|c| c.hosts).collect(),
    ))
}

/// Every server being (or last) evacuated from a host being processed. Viewer.
#[utoipa::path(get, path = "/api/v1/instance-ha/evacuations", tag = "instance-ha", security(("bearer" = [])),
    responses(
        (status = 200, body = Vec<EvacuationStatus>),
        responses::Viewer))]
pub(super) async fn instance_ha_evacuations(
    _: Viewer,
    State(s): State<AppState>,
) -> Result<Json<Vec<EvacuationStatus>>, ApiError> {
    let status = s.backend.instance_ha().await?;
    Ok(Json(
        status
            .clouds
            .into_iter()
            .flat_map(|c| c.evacuations)
            .collect(),
    ))
}
