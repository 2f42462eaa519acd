//! The `nova` controller's Keystone login settings: a password (user and project, each in a
//! domain) or an application credential, never both.

use super::Decoder;
use super::read::Fields;
use crate::config::NovaAuth;

/// Keys that belong to password authentication only.
const PASSWORD_KEYS: [&str; 4] = ["username", "user_domain", "project", "project_domain"];

/// `username` + `project` (and their domains), or `application_credential_id`.
pub(super) fn nova_auth(d: &mut Decoder, f: &Fields<'_>) -> Option<NovaAuth> {
    let domain = |d: &mut Decoder, key: &str| match f.get(key) {
        None => Some("Default".to_owned()),
        Some(n) => d.text(n, &f.path(key), "a domain name"),
    };
    if let Some(n) = f.get("application_credential_id") {
        let p = f.path("application_credential_id");
        let given: Vec<&str> = PASSWORD_KEYS
            .into_iter()
            .filter(|k| f.get(k).is_some())
            .collect();
        if !given.is_empty() {
            d.error(
                &p,
                format!(
                    "give application_credential_id (an application credential, recommended) or \
                     username and project (a password), not both; found also {}",
                    given.join(", ")
                ),
            );
            return None;
        }
        return d
            .text(n, &p, "an application credential id")
            .map(|id| NovaAuth::ApplicationCredential { id });
    }
    if f.get("username").is_none() && f.get("project").is_none() {
        d.error(
            &f.path("application_credential_id"),
            "missing: a nova controller needs application_credential_id (an application \
             credential, recommended) or username and project (a password)",
        );
        return None;
    }
    let username = d
        .require(f, "username", "the Keystone user")
        .and_then(|n| d.text(n, &f.path("username"), "a user name"));
    let project = d
        .require(f, "project", "the Keystone project the token is scoped to")
        .and_then(|n| d.text(n, &f.path("project"), "a project name"));
    let user_domain = domain(d, "user_domain");
    let project_domain = domain(d, "project_domain");
    Some(NovaAuth::Password {
        username: username?,
        user_domain: user_domain?,
        project: project?,
        project_domain: project_domain?,
    })
}
