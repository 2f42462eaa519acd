//! The HTTP side of the Proxmox VE driver: the client, token or ticket authentication,
//! one API call and its answer's envelope.

use super::*;

/// A PVE answer's error text: the body's `message` (newer PVE) and per-parameter `errors`.
pub(super) fn pve_message(status: StatusCode, body: &Value) -> String {
    let mut msg = body
        .get("message")
        .and_then(Value::as_str)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
    if let Some(errs) = body.get("errors").and_then(Value::as_object) {
        for (k, v) in errs {
            msg.push_str(&format!(
                "; {k}: {}",
                v.as_str().unwrap_or(&v.to_string()).trim()
            ));
        }
    }
    format!("HTTP {}: {msg}", status.as_u16())
}

pub(super) struct Answer {
    pub(super) data: Value,
    pub(super) fingerprint: Option<String>,
}

/// A successful answer's body, unparsed: the caller picks the shape of `data` to read.
pub(super) struct RawAnswer {
    pub(super) body: Vec<u8>,
    pub(super) fingerprint: Option<String>,
}

/// PVE's envelope, `{"data": ...}`; every other field is skipped without being built.
#[derive(serde::Deserialize)]
pub(super) struct Envelope<T> {
    #[serde(default)]
    pub(super) data: T,
}

impl Inner {
    /// The shared HTTPS client (TLS trust, same-origin redirects, no proxy), built on first
    /// use because it reads the CA file.
    pub(super) async fn client(&self) -> Result<&HttpClient, DriverError> {
        http::shared_client(&self.client, &self.id, &self.trust).await
    }

    /// The `Authorization` header or the ticket cookie and CSRF token.
    pub(super) async fn auth_headers(
        &self,
        write: bool,
        renew: bool,
    ) -> Result<Vec<(&'static str, String)>, DriverError> {
        match &self.auth {
            ProxmoxAuth::Token { token_id } => Ok(vec![(
                "authorization",
                format!("PVEAPIToken={token_id}={}", self.secret.expose_secret()),
            )]),
            ProxmoxAuth::Ticket { username } => {
                let mut t = self.ticket.lock().await;
                let stale = t.as_ref().is_none_or(|t| t.at.elapsed() > TICKET_LIFETIME);
                if renew || stale {
                    *t = Some(self.login(username).await?);
                }
                let t = t.as_ref().expect("ticket set above");
                let mut h = vec![(
                    "cookie",
                    format!("PVEAuthCookie={}", t.ticket.expose_secret()),
                )];
                if write {
                    h.push(("csrfpreventiontoken", t.csrf.expose_secret().to_owned()));
                }
                Ok(h)
            }
        }
    }

    pub(super) async fn login(&self, username: &str) -> Result<Ticket, DriverError> {
        let call = "POST /access/ticket";
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("username", username)
            .append_pair("password", self.secret.expose_secret())
            .finish();
        let url = self.url("access/ticket", &[])?;
        let resp = self
            .client()
            .await?
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| http::map_error(&self.id, call, &e, false))?;
        let status = resp.status();
        let bytes = http::read_body(&self.id, call, resp, false).await?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status == StatusCode::UNAUTHORIZED {
            return Err(self.err(ErrorKind::Auth, call, "login refused (401)", false));
        }
        if !status.is_success() {
            return Err(self.err(ErrorKind::Rejected, call, pve_message(status, &body), false));
        }
        let field = |k: &str| {
            body.pointer(&format!("/data/{k}"))
                .and_then(Value::as_str)
                .map(|s| SecretString::from(s.to_owned()))
                .ok_or_else(|| {
                    self.err(
                        ErrorKind::Protocol,
                        call,
                        format!("answer has no {k}"),
                        false,
                    )
                })
        };
        Ok(Ticket {
            ticket: field("ticket")?,
            csrf: field("CSRFPreventionToken")?,
            at: tokio::time::Instant::now(),
        })
    }

    pub(super) fn url(&self, path: &str, query: &[(&str, &str)]) -> Result<url::Url, DriverError> {
        let mut url = self
            .base
            .join(path)
            .map_err(|e| self.err(ErrorKind::Protocol, path, e.to_string(), false))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url)
    }

    /// One API call; `data` of the envelope on success.
    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        form: &[(&str, &str)],
    ) -> Result<Answer, DriverError> {
        let raw = self.call_raw(method, path, query, form).await?;
        Ok(Answer {
            data: serde_json::from_slice::<Envelope<Value>>(&raw.body)
                .map(|e| e.data)
                .unwrap_or(Value::Null),
            fingerprint: raw.fingerprint,
        })
    }

    /// [`Self::call`] without reading the body of a successful answer.
    pub(super) async fn call_raw(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        form: &[(&str, &str)],
    ) -> Result<RawAnswer, DriverError> {
        let mut renewed = false;
        let mut resent = false;
        loop {
            let call = format!("{method} /{path}");
            let write = method != Method::GET;
            let client = self.client().await?;
            let mut req = client
                .client
                .request(method.clone(), self.url(path, query)?);
            for (k, v) in self.auth_headers(write, renewed).await? {
                req = req.header(k, v);
            }
            if write {
                let body = url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(form)
                    .finish();
                req = req
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(body);
            }
            let resp = match req.send().await {
                Ok(resp) => resp,
                // A pooled keep-alive connection whose server went away (a node that lost
                // power) fails without an answer; a read is safe to send once more, on a
                // new connection, which then says what the server is: refused, silent, or
                // back.
                Err(e) if !write && !resent && !e.is_timeout() && !e.is_connect() => {
                    resent = true;
                    continue;
                }
                Err(e) => return Err(http::map_error(&self.id, &call, &e, write)),
            };
            let status = resp.status();
            let fingerprint = client.seen.get();
            let bytes = http::read_body(&self.id, &call, resp, write).await?;
            if status.is_success() {
                return Ok(RawAnswer {
                    body: bytes.to_vec(),
                    fingerprint,
                });
            }
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            // A ticket may have been revoked or expired early: log in once more.
            if status == StatusCode::UNAUTHORIZED
                && matches!(self.auth, ProxmoxAuth::Ticket { .. })
                && !renewed
            {
                renewed = true;
                continue;
            }
            let msg = pve_message(status, &body);
            let kind = match status.as_u16() {
                401 => ErrorKind::Auth,
                // PVE's proxy (AnyEvent::HTTP's pseudo-statuses): the node that owns the
                // resource does not answer (595 connect, 596 request/headers, 597 body).
                595..=597 | 502 | 503 | 504 => ErrorKind::Unreachable,
                501 => ErrorKind::Protocol,
                _ => ErrorKind::Rejected,
            };
            // A refused write (4xx) changed nothing; after a 5xx nobody can say.
            let unknown = write && status.is_server_error();
            return Err(self.err(kind, &call, msg, unknown));
        }
    }

    pub(super) async fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Value, DriverError> {
        Ok(self.call(Method::GET, path, query, &[]).await?.data)
    }
}

/// Percent-encodes a path segment (UPIDs hold colons and `@`, `!`).
pub(super) fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
