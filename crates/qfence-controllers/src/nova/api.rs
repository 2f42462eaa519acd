//! The typed client API Instance HA acts through: compute services, servers on a host,
//! flavors, images, aggregates, evacuations and their migration records, locks. Plain types
//! in and out; every method runs under the caller's [`CallContext`] (deadline, cancellation)
//! and sends the microversion `microversion.rs` gives its call.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::NovaDriver;
use super::client::{Api, Client, brief, time_left};
use super::microversion::{self as mv, Microversion};
use super::types::{
    Aggregate, ComputeService, EvacuateRequest, Evacuation, EvacuationProgress, Flavor, Image,
    Migration, MigrationType, Server, ServerStatus, ServiceState, WireAggregate, WireFlavor,
    WireMigration, WireServer, WireService,
};
use crate::driver::{CallContext, ControllerErrors, DriverError, ErrorKind};

/// Servers asked for per page of a listing.
const PAGE: usize = 1000;
/// How often a followed evacuation is read.
pub(crate) const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// Which migration records to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationFilter {
    pub server: Option<String>,
    pub source_compute: Option<String>,
    pub kind: Option<MigrationType>,
}

impl Client {
    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        call: &str,
        body: &[u8],
    ) -> Result<T, DriverError> {
        serde_json::from_slice(body).map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                call,
                format!("the answer does not parse ({e}): {}", brief(body)),
                false,
            )
        })
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        version: Microversion,
    ) -> Result<T, DriverError> {
        let a = self
            .request(Method::GET, Api::Compute, path, query, None, Some(version))
            .await?;
        self.parse(&format!("GET /{path}"), &a.body)
    }
}

#[derive(Deserialize)]
struct Services {
    services: Vec<WireService>,
}

#[derive(Deserialize)]
struct Servers {
    servers: Vec<WireServer>,
}

#[derive(Deserialize)]
struct OneServer {
    server: WireServer,
}

#[derive(Deserialize)]
struct Migrations {
    migrations: Vec<WireMigration>,
}

#[derive(Deserialize)]
struct Flavors {
    flavors: Vec<WireFlavor>,
}

#[derive(Deserialize)]
struct OneFlavor {
    flavor: WireFlavor,
}

#[derive(Deserialize)]
struct Aggregates {
    aggregates: Vec<WireAggregate>,
}

impl NovaDriver {
    /// The server's microversion range (read once, from the compute endpoint's document).
    pub async fn version_range(&self, ctx: &CallContext) -> Result<mv::VersionRange, DriverError> {
        ctx.run(&self.id, "versions", self.client.versions()).await
    }

    /// Every `nova-compute` service (2.53).
    pub async fn compute_services(
        &self,
        ctx: &CallContext,
    ) -> Result<Vec<ComputeService>, DriverError> {
        ctx.run(&self.id, "compute services", self.services_now(None))
            .await
    }

    /// The `nova-compute` service of `host`; `Rejected` when Nova has none.
    pub async fn compute_service(
        &self,
        ctx: &CallContext,
        host: &str,
    ) -> Result<ComputeService, DriverError> {
        ctx.run(&self.id, "compute service", self.service_now(host))
            .await
    }

    /// Every `nova-scheduler` service (2.53): an evacuation needs one up to place the
    /// servers.
    pub async fn scheduler_services(
        &self,
        ctx: &CallContext,
    ) -> Result<Vec<ComputeService>, DriverError> {
        ctx.run(
            &self.id,
            "scheduler services",
            self.services_of("nova-scheduler", None),
        )
        .await
    }

    pub(crate) async fn services_now(
        &self,
        host: Option<&str>,
    ) -> Result<Vec<ComputeService>, DriverError> {
        self.services_of("nova-compute", host).await
    }

    async fn services_of(
        &self,
        binary: &str,
        host: Option<&str>,
    ) -> Result<Vec<ComputeService>, DriverError> {
        let call = "GET /os-services";
        let version = self.client.need(call, mv::SERVICES).await?;
        let mut query = vec![("binary", binary.to_owned())];
        if let Some(h) = host {
            query.push(("host", h.to_owned()));
        }
        let s: Services = self.client.get_json("os-services", &query, version).await?;
        let mut out = Vec::new();
        for w in s.services {
            let typed = w
                .typed()
                .map_err(|e| self.client.err(ErrorKind::Protocol, call, e, false))?;
            // The filter is the server's; what qfence acts on is checked here.
            if host.is_none_or(|h| typed.host == h) && typed.binary == binary {
                out.push(typed);
            }
        }
        Ok(out)
    }

    pub(crate) async fn service_now(&self, host: &str) -> Result<ComputeService, DriverError> {
        let mut found = self.services_now(Some(host)).await?;
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(self.client.err(
                ErrorKind::Rejected,
                "GET /os-services",
                format!("Nova has no nova-compute service on host {host:?}"),
                false,
            )),
            n => Err(self.client.err(
                ErrorKind::Protocol,
                "GET /os-services",
                format!("Nova lists {n} nova-compute services on host {host:?}"),
                false,
            )),
        }
    }

    /// `PUT /os-services/{id}` with `change`, then the service read back (2.53).
    pub(crate) async fn update_service_now(
        &self,
        host: &str,
        change: Value,
    ) -> Result<ComputeService, DriverError> {
        let s = self.service_now(host).await?;
        let path = format!("os-services/{}", s.id);
        let version = self.client.need("PUT /os-services", mv::SERVICES).await?;
        self.client
            .request(
                Method::PUT,
                Api::Compute,
                &path,
                &[],
                Some(&change),
                Some(version),
            )
            .await?;
        // The read-back is what counts, not the PUT's echo.
        self.service_now(host).await.map_err(unknown_after_write)
    }

    /// [`Self::update_service_now`] as the call `call`, under the context's deadline: what
    /// each service change below is.
    async fn update_service(
        &self,
        ctx: &CallContext,
        call: &str,
        host: &str,
        change: Value,
    ) -> Result<ComputeService, DriverError> {
        ctx.run(&self.id, call, self.update_service_now(host, change))
            .await
    }

    /// Disables the host's service with a reason; returns it read back.
    pub async fn disable_service(
        &self,
        ctx: &CallContext,
        host: &str,
        reason: &str,
    ) -> Result<ComputeService, DriverError> {
        let change = json!({"status": "disabled", "disabled_reason": reason});
        self.update_service(ctx, "disable service", host, change)
            .await
    }

    /// Enables the host's service; returns it read back.
    pub async fn enable_service(
        &self,
        ctx: &CallContext,
        host: &str,
    ) -> Result<ComputeService, DriverError> {
        let change = json!({"status": "enabled"});
        self.update_service(ctx, "enable service", host, change)
            .await
    }

    /// Marks the host's service forced down (Nova then treats it as down at once and accepts
    /// evacuations from it). An application-level fence: it proves nothing about the host.
    pub async fn force_down(
        &self,
        ctx: &CallContext,
        host: &str,
    ) -> Result<ComputeService, DriverError> {
        self.update_service(ctx, "force down", host, json!({"forced_down": true}))
            .await
    }

    /// Clears forced-down. Nova refuses it (400) while `done` evacuation records remain on
    /// the host: its `nova-compute` must restart and clean up first.
    pub async fn clear_forced_down(
        &self,
        ctx: &CallContext,
        host: &str,
    ) -> Result<ComputeService, DriverError> {
        self.update_service(
            ctx,
            "clear forced down",
            host,
            json!({"forced_down": false}),
        )
        .await
    }

    /// The servers on `host`, every project's (2.73). The `host` query filter is Nova's; each
    /// server is kept only if its own `OS-EXT-SRV-ATTR:host` says `host`, and a server that
    /// shows no host (a credential that may not see hosts) is an error, not a guess.
    pub async fn servers_on_host(
        &self,
        ctx: &CallContext,
        host: &str,
    ) -> Result<Vec<Server>, DriverError> {
        ctx.run(&self.id, "servers on host", async {
            let all = self.list_servers(Some(host)).await?;
            let mut out = Vec::new();
            for s in all {
                match s.host.as_deref() {
                    Some(h) if h == host => out.push(s),
                    Some(other) => tracing::warn!(controller = %self.id, server = %s.id,
                        host, shown = other, "Nova listed a server of another host for a host query; left out"),
                    None => {
                        return Err(self.client.err(
                            ErrorKind::Rejected,
                            "GET /servers/detail",
                            format!(
                                "server {} shows no OS-EXT-SRV-ATTR:host: the credential may not \
                                 see hosts (Nova shows them to admins), so its host cannot be \
                                 checked",
                                s.id
                            ),
                            false,
                        ));
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Every server of every project (paged), optionally filtered by Nova to one host.
    pub(crate) async fn list_servers(
        &self,
        host: Option<&str>,
    ) -> Result<Vec<Server>, DriverError> {
        let version = self
            .client
            .best("GET /servers/detail", &mv::SERVERS)
            .await?;
        let mut out: Vec<Server> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut query = vec![("all_tenants", "1".to_owned()), ("limit", PAGE.to_string())];
            if let Some(h) = host {
                query.push(("host", h.to_owned()));
            }
            if let Some(m) = &marker {
                query.push(("marker", m.clone()));
            }
            let page: Servers = self
                .client
                .get_json("servers/detail", &query, version)
                .await?;
            let n = page.servers.len();
            out.extend(page.servers.into_iter().map(WireServer::typed));
            if n < PAGE {
                return Ok(out);
            }
            marker = out.last().map(|s| s.id.clone());
        }
    }

    /// One server (2.73); `Rejected` when it does not exist.
    pub async fn server(&self, ctx: &CallContext, id: &str) -> Result<Server, DriverError> {
        ctx.run(&self.id, "server", self.server_now(id)).await
    }

    pub(crate) async fn server_now(&self, id: &str) -> Result<Server, DriverError> {
        let version = self.client.best("GET /servers", &mv::SERVERS).await?;
        let s: OneServer = self
            .client
            .get_json(&format!("servers/{}", segment(id)), &[], version)
            .await?;
        Ok(s.server.typed())
    }

    /// Every flavor visible to the credential, with extra specs (2.61), public and private.
    pub async fn flavors(&self, ctx: &CallContext) -> Result<Vec<Flavor>, DriverError> {
        ctx.run(&self.id, "flavors", async {
            let version = self.client.need("GET /flavors/detail", mv::FLAVORS).await?;
            let f: Flavors = self
                .client
                .get_json(
                    "flavors/detail",
                    &[("is_public", "None".to_owned())],
                    version,
                )
                .await?;
            Ok(f.flavors.into_iter().map(WireFlavor::typed).collect())
        })
        .await
    }

    /// One flavor with its extra specs (2.61).
    pub async fn flavor(&self, ctx: &CallContext, id: &str) -> Result<Flavor, DriverError> {
        ctx.run(&self.id, "flavor", async {
            let version = self.client.need("GET /flavors", mv::FLAVORS).await?;
            let f: OneFlavor = self
                .client
                .get_json(&format!("flavors/{}", segment(id)), &[], version)
                .await?;
            Ok(f.flavor.typed())
        })
        .await
    }

    /// An image and its properties, from Glance v2 (Nova's own image API is gone from 2.36).
    pub async fn image(&self, ctx: &CallContext, id: &str) -> Result<Image, DriverError> {
        ctx.run(&self.id, "image", async {
            let path = format!("v2/images/{}", segment(id));
            let a = self
                .client
                .request(Method::GET, Api::Image, &path, &[], None, None)
                .await?;
            Image::from_glance(&a.json()).ok_or_else(|| {
                self.client.err(
                    ErrorKind::Protocol,
                    "GET /v2/images",
                    format!("not an image: {}", brief(&a.body)),
                    false,
                )
            })
        })
        .await
    }

    /// Every host aggregate with its hosts and metadata (2.41).
    pub async fn aggregates(&self, ctx: &CallContext) -> Result<Vec<Aggregate>, DriverError> {
        ctx.run(&self.id, "aggregates", async {
            let version = self
                .client
                .need("GET /os-aggregates", mv::AGGREGATES)
                .await?;
            let a: Aggregates = self.client.get_json("os-aggregates", &[], version).await?;
            Ok(a.aggregates.into_iter().map(WireAggregate::typed).collect())
        })
        .await
    }

    /// Migration records (2.59), newest first as Nova lists them.
    pub async fn migrations(
        &self,
        ctx: &CallContext,
        filter: &MigrationFilter,
    ) -> Result<Vec<Migration>, DriverError> {
        ctx.run(&self.id, "migrations", self.migrations_now(filter))
            .await
    }

    pub(crate) async fn migrations_now(
        &self,
        filter: &MigrationFilter,
    ) -> Result<Vec<Migration>, DriverError> {
        let version = self
            .client
            .best("GET /os-migrations", &mv::MIGRATIONS)
            .await?;
        let mut query = Vec::new();
        if let Some(s) = &filter.server {
            query.push(("instance_uuid", s.clone()));
        }
        if let Some(h) = &filter.source_compute {
            query.push(("source_compute", h.clone()));
        }
        if let Some(k) = &filter.kind {
            query.push(("migration_type", migration_type(k).to_owned()));
        }
        let m: Migrations = self
            .client
            .get_json("os-migrations", &query, version)
            .await?;
        // Filters are Nova's; the records are checked against them here.
        Ok(m.migrations
            .into_iter()
            .map(WireMigration::typed)
            .filter(|m| filter.server.as_ref().is_none_or(|s| &m.server == s))
            .filter(|m| {
                filter
                    .source_compute
                    .as_ref()
                    .is_none_or(|h| m.source_compute.as_ref() == Some(h))
            })
            .filter(|m| filter.kind.as_ref().is_none_or(|k| &m.kind == k))
            .collect())
    }

    /// Asks Nova to evacuate `server` from its (down) host. Nova answers at once; the
    /// rebuild elsewhere runs on, to be followed with [`Self::evacuation_progress`] or
    /// [`Self::follow_evacuation`]. Refused (`Rejected`) while the host's service is up, and
    /// for a server in a state that cannot be evacuated (409).
    pub async fn evacuate(
        &self,
        ctx: &CallContext,
        server: &str,
        request: &EvacuateRequest,
    ) -> Result<Evacuation, DriverError> {
        ctx.run(&self.id, "evacuate", self.evacuate_now(server, request))
            .await
    }

    pub(crate) async fn evacuate_now(
        &self,
        server: &str,
        request: &EvacuateRequest,
    ) -> Result<Evacuation, DriverError> {
        let call = "POST /servers/{id}/action evacuate";
        let version = self.client.best(call, &mv::EVACUATE).await?;
        let s = self.server_now(server).await?;
        let source = s.host.clone().ok_or_else(|| {
            self.client.err(
                ErrorKind::Rejected,
                call,
                format!("server {server} shows no host: the credential may not see hosts"),
                false,
            )
        })?;
        let earlier: Vec<u64> = self
            .migrations_now(&evacuations_of(server))
            .await?
            .into_iter()
            .map(|m| m.id)
            .collect();
        let mut body = serde_json::Map::new();
        if let Some(h) = &request.target_host {
            body.insert("host".into(), json!(h));
        }
        if version < mv::EVACUATE_CHECKS_STORAGE {
            body.insert(
                "onSharedStorage".into(),
                json!(request.on_shared_storage.unwrap_or(false)),
            );
        }
        let action = json!({"evacuate": Value::Object(body)});
        self.post_action(server, &action, version).await?;
        Ok(Evacuation {
            server: server.to_owned(),
            source,
            earlier,
            microversion: version,
        })
    }

    /// One read of where an evacuation stands: its migration record (the one that was not
    /// there before it was sent) and the server. A failed read is an error: the outcome is
    /// unknown then, never done.
    pub async fn evacuation_progress(
        &self,
        ctx: &CallContext,
        evacuation: &Evacuation,
    ) -> Result<EvacuationProgress, DriverError> {
        ctx.run(
            &self.id,
            "evacuation progress",
            self.progress_now(evacuation),
        )
        .await
    }

    pub(crate) async fn progress_now(
        &self,
        e: &Evacuation,
    ) -> Result<EvacuationProgress, DriverError> {
        let earlier: BTreeSet<u64> = e.earlier.iter().copied().collect();
        let records = self
            .migrations_now(&evacuations_of(&e.server))
            .await
            .map_err(unknown_after_write)?;
        let Some(record) = records
            .into_iter()
            .filter(|m| !earlier.contains(&m.id))
            .max_by_key(|m| m.id)
        else {
            return Ok(EvacuationProgress::Running(None));
        };
        if !record.status.succeeded() && !record.status.failed() {
            return Ok(EvacuationProgress::Running(Some(record.status)));
        }
        let server = self
            .server_now(&e.server)
            .await
            .map_err(unknown_after_write)?;
        if record.status.failed() || server.status == ServerStatus::Error {
            return Ok(EvacuationProgress::Failed {
                migration: record,
                server,
            });
        }
        // `done` is written after the rebuild; the server must show its new host and no task.
        let moved = server.host.as_deref().is_some_and(|h| h != e.source);
        if moved && server.task_state.is_none() {
            Ok(EvacuationProgress::Done {
                migration: record,
                server,
            })
        } else {
            Ok(EvacuationProgress::Running(Some(record.status)))
        }
    }

    /// Follows an evacuation until its record says done (and the server is on another host)
    /// or failed. The call's deadline passing first is a `Timeout` with the state unknown:
    /// an evacuation whose outcome was not read is never taken as done.
    pub async fn follow_evacuation(
        &self,
        ctx: &CallContext,
        evacuation: &Evacuation,
    ) -> Result<EvacuationProgress, DriverError> {
        ctx.run(&self.id, "follow evacuation", async {
            loop {
                match self.progress_now(evacuation).await? {
                    EvacuationProgress::Running(_) => {
                        let wait = FOLLOW_POLL.min(time_left(ctx.deadline));
                        tokio::time::sleep(wait).await;
                    }
                    end => return Ok(end),
                }
            }
        })
        .await
    }

    /// Locks a server with a reason (2.73); returns it read back.
    pub async fn lock(
        &self,
        ctx: &CallContext,
        server: &str,
        reason: &str,
    ) -> Result<Server, DriverError> {
        ctx.run(&self.id, "lock", self.lock_now(server, reason))
            .await
    }

    pub(crate) async fn lock_now(&self, server: &str, reason: &str) -> Result<Server, DriverError> {
        let version = self.client.need("POST lock", mv::LOCK_REASON).await?;
        self.action(server, json!({"lock": {"locked_reason": reason}}), version)
            .await
    }

    pub(crate) async fn unlock_now(&self, server: &str) -> Result<Server, DriverError> {
        self.action(server, json!({"unlock": null}), mv::BASE).await
    }

    /// Unlocks a server; returns it read back.
    pub async fn unlock(&self, ctx: &CallContext, server: &str) -> Result<Server, DriverError> {
        ctx.run(&self.id, "unlock", self.unlock_now(server)).await
    }

    /// A server action, then the server read back (an unreadable result is unknown).
    async fn action(
        &self,
        server: &str,
        action: Value,
        version: Microversion,
    ) -> Result<Server, DriverError> {
        self.post_action(server, &action, version).await?;
        self.server_now(server).await.map_err(unknown_after_write)
    }

    /// `POST /servers/{id}/action` with `action`: every server action (lock, unlock,
    /// evacuate) is one.
    async fn post_action(
        &self,
        server: &str,
        action: &Value,
        version: Microversion,
    ) -> Result<(), DriverError> {
        self.client
            .request(
                Method::POST,
                Api::Compute,
                &format!("servers/{}/action", segment(server)),
                &[],
                Some(action),
                Some(version),
            )
            .await?;
        Ok(())
    }

    /// Whether a server is where it should be: `ACTIVE`, no task under way, on a host whose
    /// service is up and not forced down. With the service it was judged by.
    pub(crate) async fn placed_well(
        &self,
        server: &Server,
    ) -> Result<(bool, Option<ComputeService>), DriverError> {
        let Some(host) = &server.host else {
            return Ok((false, None));
        };
        let svc = self.service_now(host).await?;
        let ok = server.status == ServerStatus::Active
            && server.task_state.is_none()
            && svc.state == ServiceState::Up
            && !svc.forced_down;
        Ok((ok, Some(svc)))
    }
}

/// An error reading back after a write was sent: the write may have taken effect, so the
/// target's state is unknown, whatever the read's own error says.
pub(super) fn unknown_after_write(mut e: DriverError) -> DriverError {
    e.state_unknown = true;
    e
}

/// The filter for a server's evacuation records.
fn evacuations_of(server: &str) -> MigrationFilter {
    MigrationFilter {
        server: Some(server.to_owned()),
        source_compute: None,
        kind: Some(MigrationType::Evacuation),
    }
}

fn migration_type(k: &MigrationType) -> &str {
    match k {
        MigrationType::Evacuation => "evacuation",
        MigrationType::LiveMigration => "live-migration",
        MigrationType::Migration => "migration",
        MigrationType::Resize => "resize",
        MigrationType::Other(s) => s,
    }
}

/// Percent-encodes an id used as a path segment (ids come from bindings and callers).
fn segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
