//! The HTTP side of the FortiGate driver: one REST call with its API key, and the
//! answer's status and body.

use super::*;

impl FortigateDriver {
    /// The shared HTTPS client (TLS trust, same-origin redirects, no proxy), built on first
    /// use because it reads the CA file.
    pub(super) async fn client(&self) -> Result<&HttpClient, DriverError> {
        http::shared_client(&self.client, &self.id, &self.trust).await
    }

    /// Sends one request (in this driver's VDOM) and returns whatever came back.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, DriverError> {
        let call = format!("{method} {path}");
        let write = method != Method::GET;
        let client = self.client().await?;
        let mut url = self
            .base
            .join(path)
            .map_err(|e| self.err(ErrorKind::Protocol, &call, e.to_string(), false))?;
        url.query_pairs_mut().append_pair("vdom", &self.vdom);
        let mut req = client
            .client
            .request(method, url)
            .bearer_auth(self.key.expose_secret())
            .header("accept", "application/json");
        if let Some(b) = body {
            req = req.json(b);
        }
        // A write whose answer was lost may have been applied.
        let resp = req
            .send()
            .await
            .map_err(|e| http::map_error(&self.id, &call, &e, write))?;
        let status = resp.status();
        let fingerprint = client.seen.get();
        let bytes = http::read_body(&self.id, &call, resp, write).await?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            fingerprint,
        })
    }

    /// Sends a request and requires HTTP 2xx with `status: success` in the envelope.
    pub(super) async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, DriverError> {
        let call = format!("{method} {path}");
        let write = method != Method::GET;
        let a = self.send(method, path, body).await?;
        let envelope_ok = a.body.get("status").and_then(Value::as_str) == Some("success");
        if a.status.is_success() && envelope_ok {
            return Ok(a);
        }
        let cli = a
            .body
            .get("cli_error")
            .and_then(Value::as_str)
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        let (kind, msg) = match a.status.as_u16() {
            401 => (
                ErrorKind::Auth,
                "API key refused (401): wrong key, or this host is not in the api-user's trusthost"
                    .to_owned(),
            ),
            403 => (
                ErrorKind::Rejected,
                format!(
                    "the API key's access profile does not allow this in vdom {} (403)",
                    self.vdom
                ),
            ),
            404 => (
                ErrorKind::Rejected,
                format!("not found in vdom {} (404)", self.vdom),
            ),
            s if a.status.is_success() => (
                ErrorKind::Protocol,
                format!("HTTP {s} without `status: success` in the answer{cli}"),
            ),
            s => (ErrorKind::Rejected, format!("HTTP {s}{cli}")),
        };
        // A refused write (4xx) changed nothing; a 5xx write might have.
        let unknown = write && a.status.is_server_error();
        Err(self.err(kind, &call, msg, unknown))
    }

    pub(super) async fn get_object(&self, table: &str, mkey: &str) -> Result<Value, DriverError> {
        let path = format!("api/v2/cmdb/firewall/{table}/{}", encode(mkey));
        let a = self.ok(Method::GET, &path, None).await?;
        first_result(&a.body).ok_or_else(|| {
            self.err(
                ErrorKind::Protocol,
                &format!("GET {path}"),
                "answer has no results[0]",
                false,
            )
        })
    }

    /// The VDOM's `firewall-session-dirty`, or `None` when the key may not read it.
    pub(super) async fn session_dirty(&self) -> Result<Option<String>, DriverError> {
        let path = "api/v2/cmdb/system/settings";
        let a = self.send(Method::GET, path, None).await?;
        if a.status == StatusCode::FORBIDDEN {
            return Ok(None);
        }
        if !a.status.is_success() {
            return self.ok(Method::GET, path, None).await.map(|_| None);
        }
        let results = a.body.get("results");
        let obj = match results {
            Some(Value::Array(v)) => v.first(),
            other => other,
        };
        Ok(obj
            .and_then(|o| o.get("firewall-session-dirty"))
            .and_then(Value::as_str)
            .map(str::to_owned))
    }
}
