//! Keystone v3: the login (`POST /v3/auth/tokens`, a password scoped to a project or an
//! application credential), the token it gives (kept until shortly before it expires), and
//! the service catalog the token carries, where Nova's endpoint is found.

use std::time::{Duration, SystemTime};

use qfence_model::config::{NovaAuth, NovaInterface};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};

use super::types::parse_time;

/// A token renews this long before it expires, or at a tenth of its life if that is less (a
/// short-lived token in a test cloud).
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// The body of the login request. Holds the secret: built just before it is sent.
pub(crate) fn login_body(auth: &NovaAuth, secret: &SecretString) -> Value {
    match auth {
        NovaAuth::Password {
            username,
            user_domain,
            project,
            project_domain,
        } => json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": username, "domain": {"name": user_domain},
                "password": secret.expose_secret()}}},
            "scope": {"project": {"name": project, "domain": {"name": project_domain}}}
        }}),
        // An application credential carries its own scope: Keystone refuses another.
        NovaAuth::ApplicationCredential { id } => json!({"auth": {
            "identity": {"methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret.expose_secret()}}
        }}),
    }
}

/// A token and what Keystone said with it.
pub(crate) struct Token {
    pub(crate) secret: SecretString,
    pub(crate) expires_at: Option<SystemTime>,
    /// When it was obtained (to renew at a fraction of its life).
    pub(crate) issued: SystemTime,
    pub(crate) user: String,
    pub(crate) project_id: String,
    pub(crate) project_name: String,
    pub(crate) roles: Vec<String>,
    pub(crate) catalog: Vec<CatalogService>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("expires_at", &self.expires_at)
            .field("user", &self.user)
            .field("project_id", &self.project_id)
            .field("roles", &self.roles)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// Whether to get a new one before using it at `now`.
    pub(crate) fn stale(&self, now: SystemTime) -> bool {
        let Some(exp) = self.expires_at else {
            return false;
        };
        let life = exp.duration_since(self.issued).unwrap_or_default();
        let margin = RENEW_BEFORE.min(life / 10);
        now + margin >= exp
    }

    pub(crate) fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.eq_ignore_ascii_case(role))
    }
}

#[derive(Debug, Deserialize)]
struct Answer {
    token: WireToken,
}

#[derive(Debug, Deserialize)]
struct WireToken {
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    user: Option<Named>,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    roles: Vec<Named>,
    #[serde(default)]
    catalog: Vec<CatalogService>,
}

#[derive(Debug, Deserialize)]
struct Named {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
}

/// One service of the catalog.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CatalogService {
    #[serde(default, rename = "type")]
    pub(crate) ty: String,
    #[serde(default)]
    pub(crate) endpoints: Vec<CatalogEndpoint>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CatalogEndpoint {
    #[serde(default)]
    pub(crate) interface: String,
    /// `region_id` in v3 (Keystone also sends the older `region`, the same).
    #[serde(default)]
    pub(crate) region_id: Option<String>,
    #[serde(default)]
    pub(crate) url: String,
}

/// Reads a login answer: the token from `X-Subject-Token`, the rest from the body.
pub(crate) fn parse_token(subject: Option<&str>, body: &[u8]) -> Result<Token, String> {
    let secret = subject
        .filter(|t| !t.is_empty())
        .ok_or("the answer has no X-Subject-Token")?;
    let a: Answer =
        serde_json::from_slice(body).map_err(|e| format!("the token body does not parse: {e}"))?;
    let t = a.token;
    let expires_at = match &t.expires_at {
        None => None,
        Some(s) => Some(parse_time(s).ok_or_else(|| format!("expires_at {s:?} is not a time"))?),
    };
    let project = t.project.ok_or(
        "the token is not scoped to a project (Nova needs one: check the project, or the \
         application credential's)",
    )?;
    Ok(Token {
        secret: SecretString::from(secret.to_owned()),
        expires_at,
        issued: qfence_model::time::wall_clock(),
        user: t.user.map(|u| u.name).unwrap_or_default(),
        project_id: project.id,
        project_name: project.name,
        roles: t.roles.into_iter().map(|r| r.name).collect(),
        catalog: t.catalog,
    })
}

/// The URL of service `ty` at `interface`, in `region` if one is configured; without one the
/// service must have that interface in one region only.
pub(crate) fn endpoint(
    catalog: &[CatalogService],
    ty: &str,
    interface: NovaInterface,
    region: Option<&str>,
) -> Result<(url::Url, Option<String>), String> {
    let Some(service) = catalog.iter().find(|s| s.ty == ty) else {
        let types: Vec<&str> = catalog.iter().map(|s| s.ty.as_str()).collect();
        return Err(format!(
            "the service catalog has no {ty} service (it has: {})",
            if types.is_empty() {
                "nothing: the credential may not see the catalog".to_owned()
            } else {
                types.join(", ")
            }
        ));
    };
    let at_interface: Vec<&CatalogEndpoint> = service
        .endpoints
        .iter()
        .filter(|e| e.interface == interface.as_str())
        .collect();
    fn regions<'a>(es: &[&'a CatalogEndpoint]) -> Vec<&'a str> {
        let mut r: Vec<&str> = es.iter().filter_map(|e| e.region_id.as_deref()).collect();
        r.sort_unstable();
        r.dedup();
        r
    }
    let chosen: Vec<&CatalogEndpoint> = match region {
        Some(want) => at_interface
            .iter()
            .copied()
            .filter(|e| e.region_id.as_deref() == Some(want))
            .collect(),
        None => at_interface.clone(),
    };
    let pick = match (chosen.as_slice(), region) {
        ([one], _) => *one,
        ([], Some(want)) => {
            return Err(format!(
                "the {ty} service has no {} endpoint in region {want:?} (regions: {})",
                interface.as_str(),
                regions(&at_interface).join(", ")
            ));
        }
        ([], None) => {
            return Err(format!(
                "the {ty} service has no {} endpoint",
                interface.as_str()
            ));
        }
        (many, None) if regions(many).len() > 1 => {
            return Err(format!(
                "the {ty} service has {} endpoints in several regions ({}): set `region`",
                interface.as_str(),
                regions(many).join(", ")
            ));
        }
        (many, _) => many[0],
    };
    let url = url::Url::parse(&pick.url)
        .map_err(|e| format!("the {ty} endpoint {:?} is not a URL: {e}", pick.url))?;
    if url.scheme() != "https" {
        return Err(format!(
            "the {ty} endpoint {url} is not https: qfence sends its token only over TLS (use \
             another interface, or publish an https endpoint)"
        ));
    }
    Ok((url, pick.region_id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Vec<CatalogService> {
        serde_json::from_value(json!([
            {"type": "identity", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "https://k:5000/v3"}]},
            {"type": "compute", "endpoints": [
                {"interface": "public", "region_id": "RegionOne", "url": "https://n1:8774/v2.1"},
                {"interface": "internal", "region_id": "RegionOne", "url": "http://10.0.0.1:8774/v2.1"},
                {"interface": "public", "region_id": "RegionTwo", "url": "https://n2:8774/v2.1"}]}
        ]))
        .unwrap()
    }

    #[test]
    fn the_endpoint_is_chosen_by_interface_and_region() {
        let c = catalog();
        let (e, r) = endpoint(&c, "compute", NovaInterface::Public, Some("RegionTwo")).unwrap();
        assert_eq!(
            (e.as_str(), r.as_deref()),
            ("https://n2:8774/v2.1", Some("RegionTwo"))
        );
        let e = endpoint(&c, "compute", NovaInterface::Public, None).unwrap_err();
        assert!(e.contains("set `region`"), "{e}");
        let e = endpoint(&c, "compute", NovaInterface::Internal, None).unwrap_err();
        assert!(e.contains("not https"), "{e}");
        let e = endpoint(&c, "compute", NovaInterface::Admin, None).unwrap_err();
        assert!(e.contains("no admin endpoint"), "{e}");
        let e = endpoint(&c, "image", NovaInterface::Public, None).unwrap_err();
        assert!(e.contains("identity, compute"), "{e}");
        let e = endpoint(&c, "compute", NovaInterface::Public, Some("RegionX")).unwrap_err();
        assert!(e.contains("RegionOne, RegionTwo"), "{e}");
    }

    #[test]
    fn a_token_is_read_and_renewed_before_it_expires() {
        let body = json!({"token": {"expires_at": "2030-01-01T01:00:00.000000Z",
            "user": {"id": "u", "name": "admin"}, "project": {"id": "p1", "name": "admin"},
            "roles": [{"id": "r", "name": "admin"}, {"id": "m", "name": "member"}],
            "catalog": []}});
        let mut t = parse_token(Some("tok"), body.to_string().as_bytes()).unwrap();
        assert!(t.has_role("admin"));
        let exp = t.expires_at.unwrap();
        t.issued = exp - Duration::from_secs(3600);
        assert!(!t.stale(exp - Duration::from_secs(301)));
        assert!(t.stale(exp - Duration::from_secs(299)));
        // A 10 s token renews one second before it ends, not at once.
        t.issued = exp - Duration::from_secs(10);
        assert!(!t.stale(exp - Duration::from_secs(2)));
        assert!(t.stale(exp - Duration::from_millis(900)));
        assert!(parse_token(None, body.to_string().as_bytes()).is_err());
        let unscoped = json!({"token": {"expires_at": "2030-01-01T01:00:00Z"}});
        assert!(
            parse_token(Some("t"), unscoped.to_string().as_bytes())
                .unwrap_err()
                .contains("not scoped")
        );
    }

    #[test]
    fn the_login_body_has_the_right_shape_for_each_method() {
        let s = SecretString::from("pw".to_owned());
        let b = login_body(
            &NovaAuth::Password {
                username: "qfence".into(),
                user_domain: "Default".into(),
                project: "admin".into(),
                project_domain: "Default".into(),
            },
            &s,
        );
        assert_eq!(b["auth"]["scope"]["project"]["name"], "admin");
        let b = login_body(&NovaAuth::ApplicationCredential { id: "ac".into() }, &s);
        assert_eq!(
            b["auth"]["identity"]["methods"][0],
            "application_credential"
        );
        assert!(b["auth"].get("scope").is_none(), "{b}");
    }
}
