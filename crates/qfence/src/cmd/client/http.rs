//! The API client: one reqwest client with the API's TLS trust, the bearer token, and every
//! answer turned into a value or a [`Failure`].

use std::error::Error as _;

use qfence_model::config::TlsTrust;
use qfence_runtime::dto::ErrorBody;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ApiArgs, Failure, seconds};

/// A connection to one orchestrator's API.
#[derive(Debug)]
pub struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    /// Builds the client from the command line. Opens no connection.
    pub fn new(args: &ApiArgs) -> Result<Self, Failure> {
        let base = args
            .api
            .as_deref()
            .ok_or_else(|| Failure::Usage("no API given: pass --api URL or set QFENCE_API".into()))?
            .trim_end_matches('/')
            .to_owned();
        let url = reqwest::Url::parse(&base)
            .ok()
            .filter(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "--api {base:?} is not an http(s) URL, e.g. https://dc1-a.example.net:7443"
                ))
            })?;
        // The token is a bearer credential: it crosses the network only inside TLS.
        if url.scheme() == "http" && !loopback(&url) {
            return Err(Failure::Usage(format!(
                "--api {base:?}: plain http would send the token in clear; use https (plain \
                 http is accepted on loopback only)"
            )));
        }
        let token = args
            .token
            .as_ref()
            .map(|t| t.0.trim().to_owned())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Failure::Usage("no token given: pass --token or set QFENCE_TOKEN".into())
            })?;
        let trust = match (&args.pin, &args.ca_file) {
            (Some(pin), _) => TlsTrust::Pin(pin.clone()),
            (None, Some(ca)) => TlsTrust::CaFile(ca.display().to_string()),
            (None, None) => TlsTrust::SystemRoots,
        };
        let tls = qfence_controllers::tls::client_config("the API", &trust)
            .map_err(|e| Failure::Usage(e.to_string()))?;
        let timeout = seconds(args.request_timeout_seconds, "--request-timeout-seconds")?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls.config)
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("qfence/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::Usage(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self {
            client,
            base,
            token,
        })
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        self.call::<(), T>(Method::GET, path, None).await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Failure> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Failure> {
        self.call(Method::PUT, path, Some(body)).await
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = self.client.request(method, &url).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| Failure::Unreachable(format!("{}: {}", self.base, chain(&e))))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| Failure::Unreachable(format!("{}: {}", self.base, chain(&e))))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                Failure::Failed(format!(
                    "the API answered {path} with something this qfence does not understand \
                     ({e}); is it the same version?"
                ))
            });
        }
        Err(Failure::Api {
            status: status.as_u16(),
            body: Box::new(error_body(status, &bytes)),
        })
    }
}

fn loopback(url: &reqwest::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// The error body, or one made up from the status when the answer is not the API's own (a
/// proxy's page, say).
fn error_body(status: StatusCode, bytes: &[u8]) -> ErrorBody {
    serde_json::from_slice(bytes).unwrap_or_else(|_| ErrorBody {
        code: "http_error".into(),
        message: format!(
            "HTTP {status} without the API's error body: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).trim()
        ),
        current_generation: None,
        issues: None,
        leader: None,
    })
}

/// An error and its causes, one sentence: reqwest's own message alone ("error sending
/// request") hides the reason (refused, certificate not trusted, timed out).
pub fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

/// A path segment, escaped: plan, site and controller names are checked by the API, but a
/// name with a `/` or `?` must not change which path is called.
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_cannot_change_the_path() {
        assert_eq!(seg("erp-db_1.x~"), "erp-db_1.x~");
        assert_eq!(seg("../admin?x=1"), "..%2Fadmin%3Fx%3D1");
        assert_eq!(seg("a b"), "a%20b");
    }

    fn args(api: &str) -> ApiArgs {
        ApiArgs {
            api: Some(api.to_owned()),
            token: Some(super::super::Token("t".into())),
            ca_file: None,
            pin: None,
            request_timeout_seconds: 1.0,
        }
    }

    #[test]
    fn the_token_never_goes_over_plain_http_off_loopback() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        for ok in [
            "https://dc1-a.example:7443",
            "http://127.0.0.1:7443",
            "http://localhost:1/",
            "http://[::1]:7443",
        ] {
            assert!(Api::new(&args(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "http://dc1-a.example:7443",
            "http://10.0.0.1",
            "ftp://x",
            "dc1-a:7443",
        ] {
            assert!(
                matches!(Api::new(&args(bad)), Err(Failure::Usage(_))),
                "{bad}"
            );
        }
    }
}
