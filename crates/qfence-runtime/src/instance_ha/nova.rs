//! Nova through the Nova driver: one poll into the core's [`NovaView`], and the mapping of
//! the driver's own types onto the core's (`docs/specs/instance-ha.md`, the driver table).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use qfence_controllers::driver::{CallContext, DriverError};
use qfence_controllers::nova::{self as driver, MigrationFilter, MigrationType, NovaDriver};
use qfence_core::Millis;
use qfence_core::instance_ha::{
    Aggregate, ComputeService, Migration, MigrationStatus, NovaView, SchedulerService, Server,
    ServerId, ServerStatus, ServiceState, ServiceStatus,
};
use qfence_model::OrchestratorId;
use qfence_model::config::HostName;
use tokio_util::sync::CancellationToken;

/// Hosts whose servers are listed at once during a poll.
const SERVER_READS: usize = 4;

/// A call context: the Nova controller's timeout, cancelled with `token`.
pub(super) fn context(
    me: &OrchestratorId,
    timeout: Duration,
    token: &CancellationToken,
) -> CallContext {
    CallContext {
        deadline: tokio::time::Instant::now() + timeout,
        cancel: token.child_token(),
        orchestrator: me.clone(),
    }
}

/// Reads the whole view: compute and scheduler services, the servers of every compute host,
/// their flavors' extra specs and images' properties, aggregates and evacuation records.
/// Any read that fails fails the poll (a partial view would look like missing servers).
pub(super) async fn poll(
    d: &NovaDriver,
    me: &OrchestratorId,
    timeout: Duration,
    token: &CancellationToken,
    read_at: Millis,
) -> Result<NovaView, String> {
    let ctx = || context(me, timeout, token);
    let e = |e: DriverError| e.to_string();
    let computes: Vec<ComputeService> = d
        .compute_services(&ctx())
        .await
        .map_err(e)?
        .into_iter()
        .filter_map(compute)
        .collect();
    let schedulers = d
        .scheduler_services(&ctx())
        .await
        .map_err(e)?
        .into_iter()
        .map(|s| SchedulerService {
            host: s.host,
            state: service_state(s.state),
            status: service_status(s.status),
        })
        .collect();
    // In rounds of a few hosts at once (owned names: the futures must be `Send`).
    let names: Vec<String> = computes.iter().map(|c| c.host.to_string()).collect();
    let mut listed = Vec::new();
    for round in names.chunks(SERVER_READS) {
        let reads = round.iter().map(|h| {
            let ctx = ctx();
            let h = h.clone();
            async move { d.servers_on_host(&ctx, &h).await }
        });
        for r in futures_util::future::join_all(reads).await {
            listed.extend(r.map_err(e)?);
        }
    }
    let mut flavors = BTreeMap::new();
    let mut image_ids = BTreeSet::new();
    let mut servers = Vec::new();
    for s in listed {
        flavors.insert(s.flavor.name.clone(), s.flavor.extra_specs.clone());
        if let Some(i) = &s.image {
            image_ids.insert(i.clone());
        }
        if let Some(s) = server(s) {
            servers.push(s);
        }
    }
    let mut images = BTreeMap::new();
    for id in image_ids {
        let image = d.image(&ctx(), &id).await.map_err(e)?;
        images.insert(id, image.properties);
    }
    let aggregates = d
        .aggregates(&ctx())
        .await
        .map_err(e)?
        .into_iter()
        .map(|a| Aggregate {
            name: a.name,
            hosts: a
                .hosts
                .into_iter()
                .filter_map(|h| HostName::new(h).ok())
                .collect(),
            metadata: a.metadata,
            zone: a.availability_zone,
        })
        .collect();
    let migrations = evacuations(d, &ctx(), None).await.map_err(e)?;
    Ok(NovaView {
        read_at,
        computes,
        schedulers,
        servers,
        flavors,
        images,
        aggregates,
        migrations,
        migrations_read_at: BTreeMap::new(),
    })
}

/// The evacuation records, of one server or of all.
pub(super) async fn evacuations(
    d: &NovaDriver,
    ctx: &CallContext,
    server: Option<&ServerId>,
) -> Result<Vec<Migration>, DriverError> {
    let filter = MigrationFilter {
        server: server.map(|s| s.0.clone()),
        source_compute: None,
        kind: Some(MigrationType::Evacuation),
    };
    Ok(d.migrations(ctx, &filter)
        .await?
        .into_iter()
        .filter_map(migration)
        .collect())
}

fn millis(t: SystemTime) -> Millis {
    Millis(
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

fn service_state(s: driver::ServiceState) -> ServiceState {
    match s {
        driver::ServiceState::Up => ServiceState::Up,
        driver::ServiceState::Down => ServiceState::Down,
    }
}

fn service_status(s: driver::ServiceStatus) -> ServiceStatus {
    match s {
        driver::ServiceStatus::Enabled => ServiceStatus::Enabled,
        driver::ServiceStatus::Disabled => ServiceStatus::Disabled,
    }
}

fn compute(c: driver::ComputeService) -> Option<ComputeService> {
    let updated_at = c.updated().map(millis);
    let host = HostName::new(c.host.clone())
        .inspect_err(|e| tracing::warn!("Nova reports a compute host qfence cannot name: {e}"))
        .ok()?;
    Some(ComputeService {
        host,
        zone: c.zone,
        state: service_state(c.state),
        status: service_status(c.status),
        updated_at,
        forced_down: c.forced_down,
        disabled_reason: c.disabled_reason,
    })
}

fn server_status(s: &driver::ServerStatus) -> ServerStatus {
    use driver::ServerStatus as S;
    match s {
        S::Active => ServerStatus::Active,
        S::Shutoff => ServerStatus::Shutoff,
        S::Error => ServerStatus::Error,
        S::Build => ServerStatus::Build,
        S::Rebuild => ServerStatus::Rebuild,
        S::Paused => ServerStatus::Paused,
        S::Suspended => ServerStatus::Suspended,
        S::Shelved => ServerStatus::Shelved,
        S::ShelvedOffloaded => ServerStatus::ShelvedOffloaded,
        S::Migrating => ServerStatus::Migrating,
        S::Resize => ServerStatus::Resize,
        S::VerifyResize => ServerStatus::VerifyResize,
        S::Deleted => ServerStatus::Deleted,
        S::SoftDeleted => ServerStatus::SoftDeleted,
        other => ServerStatus::Other(other.as_str().to_owned()),
    }
}

fn server(s: driver::Server) -> Option<Server> {
    let host = HostName::new(s.host.clone()?).ok()?;
    Some(Server {
        id: ServerId(s.id),
        name: s.name,
        host,
        status: server_status(&s.status),
        task_state: s.task_state,
        flavor: s.flavor.name,
        image: s.image,
        locked: s.locked,
        locked_reason: s.locked_reason,
    })
}

fn migration(m: driver::Migration) -> Option<Migration> {
    use driver::MigrationStatus as S;
    let status = match &m.status {
        S::Accepted => MigrationStatus::Accepted,
        S::PreMigrating => MigrationStatus::PreMigrating,
        S::Migrating => MigrationStatus::Migrating,
        S::Done => MigrationStatus::Done,
        S::Completed => MigrationStatus::Completed,
        S::Error => MigrationStatus::Error,
        S::Failed => MigrationStatus::Failed,
        S::Other(o) if o == "cancelled" => MigrationStatus::Cancelled,
        S::Other(o) => MigrationStatus::Other(o.clone()),
    };
    Some(Migration {
        id: m.id,
        server: ServerId(m.server),
        source: HostName::new(m.source_compute?).ok()?,
        dest: m.dest_compute.and_then(|h| HostName::new(h).ok()),
        status,
        created_at: m
            .created_at
            .as_deref()
            .and_then(driver::types::parse_time)
            .map_or(Millis(0), millis),
    })
}
