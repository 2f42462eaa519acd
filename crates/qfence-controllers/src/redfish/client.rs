//! The HTTP side of the Redfish driver: one request, with retries and the session's
//! 401 handled, and what an answer says.

use super::*;

impl RedfishDriver {
    /// Sends one request; reads at most [`http::MAX_BODY_BYTES`] of the answer. With the
    /// session, a 401 means the BMC no longer knows it (expired, deleted): a new one is made
    /// and the request sent once more (a 401 is refused before anything is done).
    pub(super) async fn send(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), DriverError> {
        match auth {
            Auth::None => self.send_as(ctx, Cred::None, method, path, body).await,
            Auth::Basic => self.send_as(ctx, Cred::Basic, method, path, body).await,
            Auth::Session => {
                let mut renewed = false;
                loop {
                    let Some(s) = self.session().await? else {
                        return self.send_as(ctx, Cred::Basic, method, path, body).await;
                    };
                    let r = self
                        .send_as(ctx, Cred::Token(&s.token), method.clone(), path, body)
                        .await?;
                    if r.0 == StatusCode::UNAUTHORIZED && !renewed {
                        tracing::info!(controller = %self.id, session = %s.location,
                            "The Redfish session is no longer valid (401); making a new one");
                        self.session.forget(&s);
                        renewed = true;
                        continue;
                    }
                    return Ok(r);
                }
            }
        }
    }

    pub(super) async fn send_as(
        &self,
        ctx: &CallContext,
        cred: Cred<'_>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), DriverError> {
        let call = format!("{method} {path}");
        let url = self.url(&call, path)?;
        let mut req = self
            .http
            .client
            .request(method.clone(), url)
            .timeout(http::remaining(ctx))
            .header("Accept", "application/json")
            .header("OData-Version", "4.0");
        if let Some(b) = body {
            req = req.json(b);
        }
        req = match cred {
            Cred::None => req,
            Cred::Basic => {
                let pw = self.secret.as_ref().map(Secret::expose);
                req.basic_auth(&self.username, pw)
            }
            Cred::Token(token) => req.header("X-Auth-Token", token.expose()),
        };
        let sent = method != Method::GET;
        let resp = req.send().await.map_err(|e| {
            let mut err = http::map_error(&self.id, &call, &e, sent);
            if e.is_connect()
                && let Some(fp) = self.http.seen.get()
                && !err.message.contains(&fp)
            {
                err.message.push_str(&format!(" (the server showed {fp})"));
            }
            err
        })?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = http::read_body(&self.id, &call, resp, sent).await?;
        Ok((status, headers, bytes))
    }

    pub(super) fn parse(&self, call: &str, bytes: &[u8]) -> Result<Value, DriverError> {
        serde_json::from_slice(bytes).map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                call,
                format!("the answer is not valid JSON: {e}"),
                false,
            )
        })
    }

    /// GET a resource that must exist, retrying 5xx and transport errors a few times.
    pub(super) async fn get(
        &self,
        ctx: &CallContext,
        auth: &Auth,
        path: &str,
    ) -> Result<Value, DriverError> {
        let call = format!("GET {path}");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.send(ctx, auth, Method::GET, path, None).await;
            let retry = match &r {
                Ok((s, _, _)) => s.is_server_error(),
                Err(e) => {
                    matches!(e.kind, ErrorKind::Unreachable | ErrorKind::Protocol)
                        && !e.message.contains("limit")
                        && !e.message.contains("certificate")
                        && !e.message.contains("redirect")
                }
            };
            if retry && attempt < ATTEMPTS && self.backoff(ctx, attempt).await {
                continue;
            }
            let (status, _, bytes) = r?;
            return match status.as_u16() {
                200..=299 => self.parse(&call, &bytes),
                401 | 403 => Err(self.err(
                    ErrorKind::Auth,
                    &call,
                    format!("the service answered {status}: {}", brief(&bytes)),
                    false,
                )),
                404 => Err(self.err(ErrorKind::Rejected, &call, "not found (404)", false)),
                s if s >= 500 => Err(self.err(
                    ErrorKind::Unreachable,
                    &call,
                    format!(
                        "the service answered {status} {attempt} times: {}",
                        brief(&bytes)
                    ),
                    false,
                )),
                _ => Err(self.err(
                    ErrorKind::Protocol,
                    &call,
                    format!("unexpected answer {status}: {}", brief(&bytes)),
                    false,
                )),
            };
        }
    }

    /// Sleeps before retry `attempt`; false when the deadline leaves no room for another try.
    pub(super) async fn backoff(&self, ctx: &CallContext, attempt: u32) -> bool {
        let wait = Duration::from_millis(200 * u64::from(attempt));
        if Instant::now() + wait + Duration::from_millis(100) >= ctx.deadline {
            return false;
        }
        tokio::time::sleep(wait).await;
        true
    }
}

/// A short, printable excerpt of an error body: the Redfish message when there is one.
pub(super) fn brief(bytes: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes)
        && let Some(m) = v.pointer("/error/message").and_then(Value::as_str)
    {
        return m.chars().take(200).collect();
    }
    let s: String = String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    if s.is_empty() { "(no body)".into() } else { s }
}
