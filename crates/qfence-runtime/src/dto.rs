//! The API's own request and response types. They are the wire format, described in the
//! OpenAPI document; the runtime's internal types convert into them, never the other way.
//! Requests refuse unknown fields, so a misspelt field is an error, not a silent default.

use serde::{Deserialize, Serialize};

use crate::auth::Access;

/// A site's fence verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum VerdictDto {
    /// An independent read-back showed the site stopped.
    Fenced,
    /// The fence was refused or the read-back showed the site running.
    Failed,
    /// Nothing shows either way. Never counts as fenced.
    Unknown,
}

impl From<qfence_model::Verdict> for VerdictDto {
    fn from(v: qfence_model::Verdict) -> Self {
        match v {
            qfence_model::Verdict::Fenced => VerdictDto::Fenced,
            qfence_model::Verdict::Failed => VerdictDto::Failed,
            qfence_model::Verdict::Unknown => VerdictDto::Unknown,
        }
    }
}

/// How well a capability's privileges were shown to work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum GradeDto {
    Proven,
    Inferred,
    Unverifiable,
    Failed,
}

impl From<qfence_model::Grade> for GradeDto {
    fn from(g: qfence_model::Grade) -> Self {
        match g {
            qfence_model::Grade::Proven => GradeDto::Proven,
            qfence_model::Grade::Inferred => GradeDto::Inferred,
            qfence_model::Grade::Unverifiable => GradeDto::Unverifiable,
            qfence_model::Grade::Failed => GradeDto::Failed,
        }
    }
}

/// One problem with a submitted plan or controller: the same shape `qfence config check`
/// prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct IssueDto {
    /// Where, as in the configuration file: `plans.erp-db.instances.dc1[0].capability`.
    pub path: String,
    /// What is wrong and what was allowed.
    pub message: String,
    /// `error` or `warning`.
    pub severity: String,
}

impl From<&qfence_model::config::Issue> for IssueDto {
    fn from(i: &qfence_model::config::Issue) -> Self {
        Self {
            path: i.path.clone(),
            message: i.message.clone(),
            severity: i.severity.as_str().to_owned(),
        }
    }
}

/// Every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Stable, machine-readable: `unauthorized`, `forbidden`, `not_found`, `invalid_json`,
    /// `invalid_body`, `invalid_query`, `unsupported_media_type`, `body_too_large`,
    /// `validation_failed`, `capability_failed`, `binding_check_failed`, `stale_generation`,
    /// `conflict`, `refused`, `not_leader`, `method_not_allowed`, `timeout`, `unavailable`,
    /// `internal`.
    pub code: String,
    /// For people: what went wrong and what to do.
    pub message: String,
    /// With `stale_generation`: the plan's generation now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_generation: Option<u64>,
    /// With `validation_failed`, `capability_failed` and `binding_check_failed`: every
    /// issue, sorted by path (the field each names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issues: Option<Vec<IssueDto>>,
    /// With `not_leader`: who leads, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<LeaderInfo>,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `ok`: the process serves requests.
    pub status: String,
    /// This orchestrator's name.
    pub orchestrator: String,
}

/// Who leads the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaderInfo {
    /// The current term.
    pub term: u64,
    /// The leader's name, when one is known.
    pub leader: Option<String>,
    /// The leader's API address, when known.
    pub address: Option<String>,
    /// Whether this orchestrator is the leader.
    pub is_self: bool,
    /// This orchestrator's name.
    pub orchestrator: String,
}

/// Where a site stands in a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SiteRole {
    /// The site runs the service.
    Owner,
    /// The site holds a copy, ready to take over.
    Standby,
}

/// One site of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SiteStatus {
    pub site: String,
    pub role: SiteRole,
    /// The fence verdict of the site's required fences, as the decision that made
    /// `last_reason` judged it (the two never disagree). For the owner, only readings taken
    /// since it became the owner count, so a host that runs the service is never FENCED.
    pub verdict: VerdictDto,
    /// When its verdict was last checked (ms since the Unix epoch).
    pub checked_at_ms: Option<u64>,
    /// What a standby's verdict stands on when it is not its fences' reading: "resource
    /// stopped" (a switchover's old owner), a hot standby's "standby, replicating from
    /// 10.0.1.5:5432, lag 0 bytes", or "not a standby: ... is writable: ..." (FAILED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub posture: Option<String>,
    /// Whether the site is in maintenance: qfence neither fails over to it nor alarms about
    /// its health.
    pub maintenance: bool,
}

/// What a plan is doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanStatus {
    pub plan: String,
    /// The site that owns the plan.
    pub owner: String,
    /// Changes with every change of ownership or of the plan; writes compare-and-set on it.
    pub generation: u64,
    /// Whether automatic actions are paused.
    pub paused: bool,
    /// The multi-step operation in progress: `steady`, `fencing`, `promoting`...
    pub phase: String,
    /// Why the operation in progress halted and waits for an operator (confirm fenced, retry
    /// or abort); absent while it runs or the plan is steady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
    /// The last decision's one-sentence reason.
    pub last_reason: String,
    pub sites: Vec<SiteStatus>,
    /// Bindings to a capability its controller's latest test graded `failed`: bound to a
    /// capability that cannot work, shown before it is needed (only a plan of the file can
    /// have one: the API refuses such a plan). Empty when none.
    #[serde(default)]
    pub unworkable: Vec<UnworkableBinding>,
}

/// A binding to a capability that cannot work: its controller's latest test graded it
/// `failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnworkableBinding {
    /// The binding's capability field, as in the configuration file:
    /// `plans.erp-db.instances.dc2[0].capability`.
    pub path: String,
    /// The site whose instance holds the binding; absent for a service binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    pub controller: String,
    pub capability: String,
    /// The grade's reason, as the test gave it.
    pub reason: String,
}

impl std::fmt::Display for UnworkableBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: bound to a capability that cannot work: {} of controller {} was graded failed \
             by its latest test ({})",
            self.path, self.capability, self.controller, self.reason
        )
    }
}

/// `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusResponse {
    pub leader: LeaderInfo,
    pub plans: Vec<PlanStatus>,
}

/// A plan as stored: its document (the structure of `plans.NAME` in the configuration file)
/// and a staged change, if one waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanView {
    pub name: String,
    pub generation: u64,
    /// The plan in force, as the configuration file writes it.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub spec: serde_json::Value,
    pub paused: bool,
    /// A change that waits to be applied.
    pub staged: Option<StagedPlan>,
    /// Where the plan comes from: `file` (change it in the configuration file) or `api`
    /// (created through the API, managed here).
    #[serde(default)]
    pub source: PlanSource,
    /// The sites in maintenance: never failed or switched over to, checked without alarms.
    #[serde(default)]
    pub maintenance: Vec<String>,
}

/// Where a plan comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// The configuration file: the API shows it, and refuses to change or delete it.
    #[default]
    File,
    /// Created through the API and kept in the cluster's replicated state.
    Api,
}

/// A staged change of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StagedPlan {
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub spec: serde_json::Value,
    /// The generation it was staged on. Applying it needs that generation to still hold.
    pub base_generation: u64,
    /// Who staged it (the token's name).
    pub staged_by: String,
    /// When (ms since the Unix epoch).
    #[serde(default)]
    pub staged_at_ms: Option<u64>,
    /// Validation's warnings about it.
    pub warnings: Vec<IssueDto>,
}

/// `POST /api/v1/plans`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreatePlan {
    /// The plan's name: letters, digits, `-`, `_` or `.`, starting with a letter or digit, at
    /// most 63 characters.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    pub name: String,
    /// The plan, as the configuration file writes it under `plans.NAME`.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub spec: serde_json::Value,
}

/// `PUT /api/v1/plans/{plan}/staged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StagePlan {
    /// The new plan, whole.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub spec: serde_json::Value,
}

/// `POST /api/v1/plans/{plan}/apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ApplyStaged {
    /// The generation the caller saw. A different current generation is a 409.
    pub expected_generation: u64,
}

/// `DELETE /api/v1/plans/{plan}?expected_generation=N`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeletePlanQuery {
    /// The generation the caller saw.
    pub expected_generation: u64,
}

/// What a dry run asks about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum DryRun {
    /// What the next cycle would do, as things are.
    Cycle,
    /// What applying the staged change would change.
    ApplyStaged,
    /// What a switchover to `target` would do.
    Switchover { target: String },
    /// What a failover would do (to `target`, or by priority).
    Failover { target: Option<String> },
}

/// The answer to a dry run. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DryRunResult {
    pub plan: String,
    pub generation: u64,
    /// The decision's one-sentence reason.
    pub reason: String,
    /// The commands it would issue, in order, one line each.
    pub commands: Vec<String>,
    /// Whether it would refuse (for example: the owner is not proven fenced).
    pub refused: bool,
}

/// A capability's grade, from the last test of its controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapabilityGrade {
    pub capability: String,
    pub grade: GradeDto,
    /// How the grade was reached.
    pub detail: String,
}

/// A controller, with the grades of its last test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ControllerView {
    pub name: String,
    /// Its type: `redfish`, `ipmi`, `proxmox`...
    #[serde(rename = "type")]
    pub controller_type: String,
    pub site: String,
    pub reach: Vec<String>,
    /// The name of its secret. Never the secret.
    pub secret: Option<String>,
    pub grades: Vec<CapabilityGrade>,
    /// When it was last tested (ms since the Unix epoch).
    pub tested_at_ms: Option<u64>,
    /// The identity its tests pinned: every fence through it first checks that it still
    /// answers with this one. Absent until a test read one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// `POST /api/v1/controllers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterController {
    /// The controller's name (the same rules as a plan's).
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    pub name: String,
    /// The controller, as the configuration file writes it under `controllers.NAME`; its
    /// credential by reference only (`secret: NAME`).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub spec: serde_json::Value,
}

/// `POST /api/v1/controllers/{controller}/test` and `POST /api/v1/controllers/probe`: the
/// registration steps, run without side effects on the controller's targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ControllerTest {
    pub controller: String,
    pub reachable: bool,
    /// What the controller says it is (the same for every controller driving the same system).
    pub identity: Option<String>,
    pub grades: Vec<CapabilityGrade>,
    /// One sentence.
    pub message: String,
    /// For a TLS target: the SHA-256 fingerprint of the certificate it showed
    /// (`sha256:` + hex), to compare with the device's and pin (`tls: {pin: ...}`).
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
    /// Further facts the target told (vendor, version, serial...).
    #[serde(default)]
    pub facts: std::collections::BTreeMap<String, String>,
    /// What passed but deserves a look (TLS checking off, another controller on the same
    /// system, a capability that failed, validation's warnings).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The four registration steps, in order: configuration, secret, connectivity,
    /// capabilities.
    #[serde(default)]
    pub steps: Vec<RegistrationStep>,
}

/// One registration step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegistrationStep {
    /// 1 to 4.
    pub number: u8,
    /// `configuration`, `secret`, `connectivity` or `capabilities`.
    pub name: String,
    /// `ok`, `warning`, `failed` or `skipped` (an earlier step failed).
    pub status: String,
    /// What was found, in sentences.
    pub notes: Vec<String>,
}

/// `GET /api/v1/controllers/{controller}/resources`: one thing a capability of the
/// controller can act on, as the controller lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiscoveredResource {
    /// The capability (`vm.stop`, `power.off`...).
    pub capability: String,
    /// What to write in a binding's `resource` (`pve-dc1-01/101`).
    pub resource: String,
    /// A short description (`VM 101 "erp-db" on pve-dc1-01, running`).
    pub description: String,
}

/// `POST /api/v1/plans/{plan}/switchover`: a planned move of ownership.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SwitchoverRequest {
    /// The site to move ownership to.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    pub target: String,
    pub expected_generation: u64,
    /// Why, for the event log.
    pub reason: Option<String>,
}

/// `POST /api/v1/plans/{plan}/failover`: fence the owner, then promote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FailoverRequest {
    /// The new owner; by the plan's priority when absent.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    )]
    pub target: Option<String>,
    pub expected_generation: u64,
    pub reason: Option<String>,
}

/// `POST /api/v1/plans/{plan}/sites/{site}/confirm-fenced`: the operator vouches that the
/// site is stopped (checked by hand), for when no fence can show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConfirmFencedRequest {
    pub expected_generation: u64,
    /// How the operator knows. Required, recorded in the event log.
    pub reason: String,
}

/// `POST /api/v1/plans/{plan}/sites/{site}/rejoin`: let an old owner a failover gave up
/// rejoin as a replica of the owner (its `rejoin` bindings: pg_rewind, or a re-clone when
/// that fails). The core refuses it when unsafe (ADR 0023, "After a failover").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RejoinRequest {
    pub expected_generation: u64,
    /// Why, for the event log.
    pub reason: Option<String>,
}

/// `PUT /api/v1/plans/{plan}/sites/{site}/maintenance`: take a site in or out of maintenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MaintenanceRequest {
    pub enabled: bool,
    pub expected_generation: u64,
    /// Why, for the event log.
    pub reason: Option<String>,
}

/// A secret reference and who uses it. Never the secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretRefView {
    /// The name each orchestrator resolves in its own store.
    pub name: String,
    /// The controllers that name it.
    pub used_by: Vec<String>,
}

/// `POST /api/v1/plans/{plan}/pause` and `/resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PauseRequest {
    pub reason: Option<String>,
}

/// An operation accepted: the new generation, and what will happen next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OperationAccepted {
    pub plan: String,
    /// `switchover`, `failover`, `confirm_fenced`, `rejoin`, `pause`, `resume`, `maintenance`.
    pub operation: String,
    /// The plan's generation after the change.
    pub generation: u64,
    /// One sentence.
    pub reason: String,
}

/// One orchestrator of the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrchestratorView {
    pub name: String,
    pub site: String,
    pub address: String,
    pub leader: bool,
    /// Whether the leader heard from it recently.
    pub reachable: bool,
    /// When it was last heard from (ms since the Unix epoch).
    pub last_seen_ms: Option<u64>,
}

/// `GET /api/v1/whoami`: the caller's token name and role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    pub name: String,
    pub role: Access,
}

pub use crate::instance_ha::view::{CloudStatus, EvacuationStatus, HostStatus, InstanceHaStatus};
