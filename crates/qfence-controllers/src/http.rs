//! The HTTP client every HTTPS driver shares: one `reqwest::Client` per controller (the TLS
//! pin is per target), no proxies, redirects only to the same scheme, host and port, a cap
//! on response bodies, and errors that name the controller and the call.
//!
//! A hostile or broken target must not be able to make qfence hang past a deadline, eat its
//! memory or send it elsewhere: every request carries the remaining time of its call as its
//! timeout, bodies are read chunk by chunk up to [`MAX_BODY_BYTES`], and a redirect to
//! another origin is an error.

use std::time::Duration;

use qfence_model::ControllerId;
use qfence_model::config::TlsTrust;
use reqwest::redirect;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::driver::{CallContext, DriverError, ErrorKind};
use crate::error::Error;
use crate::tls::{self, SeenCert};

/// The largest response body qfence reads from a controller. Redfish resources are a few KiB;
/// a Proxmox VE listing of 5,000 guests is about 1.3 MB (some 250 bytes a guest), so the
/// limit leaves room for some 60,000 while still bounding what a broken server can send.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How many redirects a call may follow (all to the same origin).
pub const MAX_REDIRECTS: usize = 5;

/// A controller's HTTP client.
#[derive(Debug, Clone)]
pub struct HttpClient {
    pub client: reqwest::Client,
    /// The certificate the server last showed.
    pub seen: SeenCert,
    /// A warning to repeat wherever the controller is used (`insecure: true`).
    pub warning: Option<String>,
}

/// The client kept in `cell`, built on first use (building reads the CA file, which a
/// driver's build must not): the drivers' one way to reach their client.
pub(crate) async fn shared_client<'a>(
    cell: &'a OnceCell<HttpClient>,
    controller: &ControllerId,
    trust: &TlsTrust,
) -> Result<&'a HttpClient, DriverError> {
    cell.get_or_try_init(|| async {
        build_client(controller, trust).map_err(|e| {
            DriverError::new(
                ErrorKind::Unreachable,
                controller,
                "tls",
                e.to_string(),
                false,
            )
        })
    })
    .await
}

/// Builds the client for `controller`. No connection is opened.
pub fn build_client(controller: &ControllerId, trust: &TlsTrust) -> Result<HttpClient, Error> {
    let setup = tls::client_config(controller.as_str(), trust)?;
    let policy = redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        let url = attempt.url().clone();
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        match first {
            Some(first) if same_origin(&first, &url) => attempt.follow(),
            Some(first) => attempt.error(format!(
                "refused a redirect from {} to another origin: {}",
                origin(&first),
                origin(&url)
            )),
            None => attempt.follow(),
        }
    });
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(setup.config)
        .redirect(policy)
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(8)
        .build()
        .map_err(|e| Error::Build {
            controller: controller.to_string(),
            reason: format!("HTTP client: {}", chain(&e)),
        })?;
    Ok(HttpClient {
        client,
        seen: setup.seen,
        warning: setup.warning,
    })
}

fn same_origin(a: &url::Url, b: &url::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

fn origin(u: &url::Url) -> String {
    format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str().unwrap_or(""),
        u.port_or_known_default().unwrap_or(0)
    )
}

/// An error and its causes, joined: reqwest hides the useful part (the TLS alert, the
/// verifier's message) in the source chain.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// The time left before the call's deadline (at least a millisecond, so reqwest fails fast
/// rather than waiting for ever).
pub fn remaining(ctx: &CallContext) -> Duration {
    ctx.deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Maps a reqwest error onto a driver error. `sent` says whether the request may have reached
/// the target (so a lost answer leaves its state unknown).
pub fn map_error(
    controller: &ControllerId,
    call: &str,
    e: &reqwest::Error,
    sent: bool,
) -> DriverError {
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else if e.is_connect() {
        ErrorKind::Unreachable
    } else {
        ErrorKind::Protocol
    };
    // A refused connection never carried the request.
    let state_unknown = sent && !e.is_connect();
    let msg = chain(e);
    DriverError::new(kind, controller, call, msg, state_unknown)
}

/// Reads a response body, refusing more than [`MAX_BODY_BYTES`].
pub async fn read_body(
    controller: &ControllerId,
    call: &str,
    mut resp: reqwest::Response,
    sent: bool,
) -> Result<Vec<u8>, DriverError> {
    if let Some(len) = resp.content_length()
        && len > MAX_BODY_BYTES as u64
    {
        return Err(DriverError::new(
            ErrorKind::Protocol,
            controller,
            call,
            format!("answer of {len} bytes is larger than the {MAX_BODY_BYTES}-byte limit"),
            sent,
        ));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| map_error(controller, call, &e, sent))?
    {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(DriverError::new(
                ErrorKind::Protocol,
                controller,
                call,
                format!("answer is larger than the {MAX_BODY_BYTES}-byte limit"),
                sent,
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let a = url::Url::parse("https://127.0.0.1:8000/redfish/v1/Systems/node1").unwrap();
        let b = url::Url::parse("https://127.0.0.1:8000/redfish/v1/Systems/uuid").unwrap();
        let c = url::Url::parse("https://127.0.0.2:8000/x").unwrap();
        let d = url::Url::parse("http://127.0.0.1:8000/x").unwrap();
        assert!(same_origin(&a, &b));
        assert!(!same_origin(&a, &c));
        assert!(!same_origin(&a, &d));
    }
}
