//! Registration's probe: who the token is (user, project, roles), which cloud and region the
//! compute endpoint is, the server's microversion range, and each capability graded.
//!
//! Grades: `host.status` is proven by listing the compute services (Nova's policy gives that
//! API to admins: a 403 is `failed`). Changing a service, evacuating and locking cannot be
//! tried without acting, so they are inferred from the token's roles against Nova's default
//! policy (admin for services and evacuate; a project member or admin for lock), failed when
//! the listing's 403 shows the default policy in force and the role is missing, and
//! unverifiable when a custom policy is in play.

use std::collections::BTreeMap;

use qfence_model::Grade;

use super::NovaDriver;
use super::driver::{DISABLE, EVACUATE, FORCE_DOWN, LOCK, STATUS};
use super::microversion as mv;
use super::types::{ServiceState, ServiceStatus};
use crate::driver::{CapabilityGrade, DriverError, ErrorKind, Identity, Probe};

fn grade(capability: &str, grade: Grade, reason: impl Into<String>) -> CapabilityGrade {
    CapabilityGrade {
        capability: capability.to_owned(),
        grade,
        reason: reason.into(),
    }
}

impl NovaDriver {
    pub(crate) async fn probe_now(&self) -> Result<Probe, DriverError> {
        let session = self.client.session(None).await?;
        let range = self.client.versions().await?;
        let token = &session.token;
        let roles = if token.roles.is_empty() {
            "none".to_owned()
        } else {
            token.roles.join(", ")
        };
        let admin = token.has_role("admin");
        let member = admin || token.has_role("member");
        let mut warnings = Vec::new();
        let mut facts = BTreeMap::from([
            ("keystone".to_owned(), self.client_keystone()),
            ("compute_endpoint".to_owned(), session.compute.to_string()),
            (
                "region".to_owned(),
                session.region.clone().unwrap_or_else(|| "(none)".into()),
            ),
            ("project".to_owned(), token.project_name.clone()),
            ("project_id".to_owned(), token.project_id.clone()),
            ("user".to_owned(), token.user.clone()),
            ("roles".to_owned(), roles.clone()),
            ("microversions".to_owned(), range.to_string()),
            ("auth".to_owned(), self.auth_method().to_owned()),
        ]);
        // Listing services is the one permission Nova shows without acting.
        let listed = if range.contains(mv::SERVICES) {
            match self.services_now(None).await {
                Ok(s) => Ok(s),
                Err(e) if e.kind == ErrorKind::Rejected => Err(format!(
                    "GET /os-services was refused ({}): Nova's policy gives the services API to \
                     admins; the token's roles: {roles}",
                    e.message
                )),
                Err(e) => return Err(e),
            }
        } else {
            Err(format!(
                "the server offers microversions {range}; compute services need {}",
                mv::SERVICES
            ))
        };
        let default_policy_refused = listed.is_err();
        if let Ok(services) = &listed {
            facts.insert("compute_hosts".into(), services.len().to_string());
            let down = services
                .iter()
                .filter(|s| s.state == ServiceState::Down)
                .count();
            facts.insert("compute_hosts_down".into(), down.to_string());
            for s in services {
                if s.state == ServiceState::Down || s.status == ServiceStatus::Disabled {
                    warnings.push(format!("compute host {}", s.describe()));
                }
            }
        }
        let mut grades = service_grades(&listed, admin, &roles);
        grades.extend(action_grades(
            range,
            admin,
            member,
            default_policy_refused,
            &roles,
        ));
        if !admin {
            warnings.push(format!(
                "the token has no admin role (roles: {roles}): Instance HA needs the services \
                 API and evacuate, which Nova's default policy gives to admins"
            ));
        }
        let http = self.client.http().await?;
        if let Some(w) = &http.warning {
            warnings.push(w.clone());
        }
        // The cloud's region and Keystone's project: a second controller for the same
        // compute endpoint, region and project is the same authority over the same hosts.
        let id = format!(
            "nova {} region {} project {}",
            session.compute,
            session.region.as_deref().unwrap_or("-"),
            token.project_id
        );
        Ok(Probe {
            identity: Identity {
                id,
                facts,
                tls_fingerprint: http.seen.get(),
            },
            grades,
            warnings,
        })
    }
}

/// `server.evacuate` and `server.lock`, from the token's roles against Nova's default policy.
fn action_grades(
    range: mv::VersionRange,
    admin: bool,
    member: bool,
    default_policy_refused: bool,
    roles: &str,
) -> Vec<CapabilityGrade> {
    let evacuate = match range.choose(&mv::EVACUATE) {
        None => grade(
            EVACUATE,
            Grade::Failed,
            format!("the server offers microversions {range}, none for evacuate"),
        ),
        Some(_) if admin => grade(
            EVACUATE,
            Grade::Inferred,
            "the token holds role admin, which Nova's default policy asks for evacuate; \
             whether another host has room is known only when one is needed",
        ),
        Some(_) if default_policy_refused => grade(
            EVACUATE,
            Grade::Failed,
            format!(
                "Nova's default policy (in force: the services listing was refused) gives \
                 evacuate to admins; the token's roles: {roles}"
            ),
        ),
        Some(_) => grade(
            EVACUATE,
            Grade::Unverifiable,
            format!("no role admin (roles: {roles}) under a custom policy"),
        ),
    };
    let lock = if !range.contains(mv::LOCK_REASON) {
        grade(
            LOCK,
            Grade::Failed,
            format!(
                "the server offers microversions {range}; a lock with a reason needs {}",
                mv::LOCK_REASON
            ),
        )
    } else if member {
        grade(
            LOCK,
            Grade::Inferred,
            format!(
                "Nova's default policy lets a project member lock its project's servers and \
                 an admin any server; the token's roles: {roles}"
            ),
        )
    } else {
        grade(
            LOCK,
            Grade::Unverifiable,
            format!("neither admin nor member (roles: {roles})"),
        )
    };
    vec![evacuate, lock]
}

/// `host.status` from the listing itself; `host.force_down` and `host.disable` from the
/// token's roles, as a change cannot be tried without acting.
fn service_grades(
    listed: &Result<Vec<super::ComputeService>, String>,
    admin: bool,
    roles: &str,
) -> Vec<CapabilityGrade> {
    let services = match listed {
        Ok(s) => s,
        Err(why) => {
            return [STATUS, FORCE_DOWN, DISABLE]
                .into_iter()
                .map(|c| grade(c, Grade::Failed, why.clone()))
                .collect();
        }
    };
    let change = if admin {
        (
            Grade::Inferred,
            "the token holds role admin, which Nova's default policy asks for PUT \
             /os-services; only a real change would prove it"
                .to_owned(),
        )
    } else {
        (
            Grade::Unverifiable,
            format!(
                "the services listing works without role admin (roles: {roles}), so Nova's \
                 policy is not the default; whether it allows PUT /os-services cannot be read \
                 without changing a service"
            ),
        )
    };
    vec![
        grade(
            STATUS,
            Grade::Proven,
            format!("GET /os-services lists {} compute hosts", services.len()),
        ),
        grade(FORCE_DOWN, change.0, change.1.clone()),
        grade(DISABLE, change.0, change.1),
    ]
}
