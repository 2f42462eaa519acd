//! Redfish sessions: one shared by every call, made by a task of the driver's own,
//! remade when the BMC forgets it, deleted by `close` or when the driver is dropped.

use super::*;

impl SessionCache {
    pub(super) fn current(&self) -> Option<Arc<Session>> {
        self.current.lock().ok().and_then(|g| g.clone())
    }

    pub(super) fn endings(&self) -> u64 {
        self.outcome.lock().map(|g| g.0).unwrap_or(0)
    }

    /// The error of a making that ended after `seen`, if the last one failed.
    pub(super) fn failed_since(&self, seen: u64) -> Option<DriverError> {
        let g = self.outcome.lock().ok()?;
        if g.0 > seen { g.1.clone() } else { None }
    }

    pub(super) fn record(&self, made: &Result<Option<Arc<Session>>, DriverError>) {
        if let Ok(Some(s)) = made
            && let Ok(mut g) = self.current.lock()
        {
            *g = Some(s.clone());
        }
        if let Ok(mut g) = self.outcome.lock() {
            g.0 += 1;
            g.1 = made.as_ref().err().cloned();
        }
    }

    /// Forgets `s` if it is still the current session (the BMC no longer knows it).
    pub(super) fn forget(&self, s: &Arc<Session>) {
        if let Ok(mut g) = self.current.lock()
            && g.as_ref().is_some_and(|c| Arc::ptr_eq(c, s))
        {
            *g = None;
        }
    }

    pub(super) fn take(&self) -> Option<Arc<Session>> {
        self.current.lock().ok().and_then(|mut g| g.take())
    }
}

impl Drop for SessionCache {
    /// Best-effort: deletes the session from a task on the current runtime, if there is one.
    /// [`RedfishDriver::close`] is the way that waits for it.
    fn drop(&mut self) {
        let Some(s) = self.current.get_mut().ok().and_then(Option::take) else {
            return;
        };
        let (Ok(rt), Ok(url)) = (
            tokio::runtime::Handle::try_current(),
            self.base.join(&s.location),
        ) else {
            tracing::warn!(controller = %self.id, session = %s.location,
                "The Redfish driver went without a runtime to delete its session; the BMC will expire it");
            return;
        };
        let req = self
            .http
            .delete(url)
            .timeout(LOGOUT_TIMEOUT)
            .header("X-Auth-Token", s.token.expose())
            .header("OData-Version", "4.0");
        let id = self.id.clone();
        rt.spawn(async move {
            match req.send().await {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => {
                    tracing::warn!(controller = %id, session = %s.location, status = %r.status(),
                    "The Redfish service refused to delete qfence's session")
                }
                Err(e) => tracing::warn!(controller = %id, session = %s.location, error = %e,
                    "Could not delete qfence's Redfish session"),
            }
        });
    }
}

impl RedfishDriver {
    /// How this call authenticates; with sessions, makes sure there is one first.
    pub(super) async fn login(&self) -> Result<Auth, DriverError> {
        if self.auth == RedfishAuth::Basic || self.no_sessions.load(Ordering::Relaxed) {
            return Ok(Auth::Basic);
        }
        Ok(match self.session().await? {
            Some(_) => Auth::Session,
            None => Auth::Basic,
        })
    }

    /// The driver's session, made now if there is none; `None` when the service has no
    /// sessions. Waits (within the caller's deadline, as every call runs under it) for a
    /// making already under way rather than starting another.
    ///
    /// Boxed: making a session sends requests, which may need the session; the box breaks
    /// that cycle for the compiler's `Send` check.
    pub(super) fn session(&self) -> SessionFuture<'_> {
        Box::pin(self.session_now())
    }

    pub(super) async fn session_now(&self) -> Result<Option<Arc<Session>>, DriverError> {
        if let Some(s) = self.session.current() {
            return Ok(Some(s));
        }
        if self.no_sessions.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let seen = self.session.endings();
        let guard = self.session.making.clone().lock_owned().await;
        if let Some(s) = self.session.current() {
            return Ok(Some(s));
        }
        if self.no_sessions.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(e) = self.session.failed_since(seen) {
            return Err(e);
        }
        // The making runs in its own task holding the lock: if this caller is cancelled or
        // reaches its deadline, the task still records (or deletes) what the BMC made.
        let this = self.share();
        let task = tokio::spawn(async move {
            let _making = guard;
            let ctx = CallContext::with_timeout(
                qfence_model::OrchestratorId::new("login").expect("valid name"),
                LOGIN_TIMEOUT,
            );
            let made = ctx
                .run(&this.id, "login", this.make_session(&ctx))
                .await
                .map(|s| s.map(Arc::new));
            this.session.record(&made);
            made
        });
        task.await.map_err(|e| {
            self.err(
                ErrorKind::Protocol,
                "login",
                format!("making a session failed: {e}"),
                true,
            )
        })?
    }

    /// POSTs a new session. `None` when the service has no sessions.
    pub(super) async fn make_session(
        &self,
        ctx: &CallContext,
    ) -> Result<Option<Session>, DriverError> {
        let Some(sessions) = self.sessions_path(ctx).await? else {
            self.fall_back_to_basic();
            return Ok(None);
        };
        let call = format!("POST {sessions}");
        let password = self.secret.as_ref().map(Secret::expose).unwrap_or("");
        let body = serde_json::json!({"UserName": self.username, "Password": password});
        let (status, headers, bytes) = self
            .send_as(ctx, Cred::None, Method::POST, &sessions, Some(&body))
            .await?;
        drop(body);
        match status.as_u16() {
            200 | 201 if String::from_utf8_lossy(&bytes).contains("PasswordChangeRequired") => {
                // The session would only allow changing the password: a configuration error,
                // not something to retry. Delete what was made.
                if let Some(loc) = headers.get("Location").and_then(|v| v.to_str().ok())
                    && let Some(token) = headers.get("X-Auth-Token").and_then(|v| v.to_str().ok())
                {
                    let path = url::Url::parse(loc)
                        .map(|u| u.path().to_owned())
                        .unwrap_or_else(|_| loc.to_owned());
                    self.logout(&Session {
                        token: Secret::new(token.to_owned()),
                        location: path,
                    })
                    .await;
                }
                Err(self.err(
                    ErrorKind::Auth,
                    &call,
                    format!("the account {:?} must change its password before it can act (PasswordChangeRequired)", self.username),
                    false,
                ))
            }
            200 | 201 => {
                let token = headers
                    .get("X-Auth-Token")
                    .and_then(|v| v.to_str().ok())
                    .map(|t| Secret::new(t.to_owned()))
                    .ok_or_else(|| {
                        self.err(
                            ErrorKind::Protocol,
                            &call,
                            "session made without an X-Auth-Token",
                            false,
                        )
                    })?;
                let location = headers
                    .get("Location")
                    .and_then(|v| v.to_str().ok())
                    .map(|l| {
                        url::Url::parse(l)
                            .map(|u| u.path().to_owned())
                            .unwrap_or_else(|_| l.to_owned())
                    })
                    .or_else(|| {
                        serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
                            v.get("@odata.id")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        })
                    })
                    .ok_or_else(|| {
                        self.err(
                            ErrorKind::Protocol,
                            &call,
                            "session made without a Location to delete it by",
                            false,
                        )
                    })?;
                tracing::debug!(controller = %self.id, session = %location, "Made a Redfish session");
                Ok(Some(Session { token, location }))
            }
            404 | 405 => {
                self.fall_back_to_basic();
                Ok(None)
            }
            401 | 403 => Err(self.err(
                ErrorKind::Auth,
                &call,
                format!(
                    "the service refused the credentials of user {:?} ({status})",
                    self.username
                ),
                false,
            )),
            _ => Err(self.err(
                ErrorKind::Protocol,
                &call,
                format!("unexpected answer {status}: {}", brief(&bytes)),
                false,
            )),
        }
    }

    pub(super) fn fall_back_to_basic(&self) {
        if !self.no_sessions.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                controller = %self.id,
                "The Redfish service has no SessionService; using basic authentication"
            );
        }
    }

    /// Where sessions are made, from the service root (which needs no authentication):
    /// `Links.Sessions`, or the standard path when only `SessionService` is shown. `None` when
    /// the service has no sessions.
    pub(super) async fn sessions_path(
        &self,
        ctx: &CallContext,
    ) -> Result<Option<String>, DriverError> {
        if let Ok(g) = self.sessions.lock()
            && let Some(p) = g.as_ref()
        {
            return Ok(Some(p.clone()));
        }
        let root = self.get(ctx, &Auth::None, "/redfish/v1/").await?;
        let path = root
            .pointer("/Links/Sessions/@odata.id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| root.get("SessionService").map(|_| SESSIONS.to_owned()));
        if let (Some(p), Ok(mut g)) = (&path, self.sessions.lock()) {
            *g = Some(p.clone());
        }
        Ok(path)
    }

    /// Deletes a session, bounded by [`LOGOUT_TIMEOUT`].
    pub(super) async fn logout(&self, s: &Session) {
        let location = &s.location;
        let ctx = CallContext::with_timeout(
            qfence_model::OrchestratorId::new("logout").expect("valid name"),
            LOGOUT_TIMEOUT,
        );
        let r = tokio::time::timeout(
            LOGOUT_TIMEOUT,
            self.send_as(&ctx, Cred::Token(&s.token), Method::DELETE, location, None),
        )
        .await;
        match r {
            Ok(Ok((s, _, _))) if s.is_success() => {}
            Ok(Ok((s, _, _))) => {
                tracing::warn!(controller = %self.id, session = %location, status = %s,
                "The Redfish service refused to delete qfence's session")
            }
            Ok(Err(e)) => tracing::warn!(controller = %self.id, session = %location, error = %e,
                "Could not delete qfence's Redfish session"),
            Err(_) => tracing::warn!(controller = %self.id, session = %location,
                "Deleting qfence's Redfish session timed out"),
        }
    }

    /// Runs `f` authenticated, under the call's deadline and cancellation. The session
    /// stays for the next call.
    pub(super) async fn authed<T, F>(
        &self,
        ctx: &CallContext,
        call: &str,
        f: F,
    ) -> Result<T, DriverError>
    where
        F: AsyncFnOnce(&Auth) -> Result<T, DriverError>,
    {
        ctx.run(&self.id, call, async {
            let auth = self.login().await?;
            f(&auth).await
        })
        .await
    }
}
