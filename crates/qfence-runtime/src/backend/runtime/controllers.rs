//! Controllers through the API: list, register, test and probe them where routing says
//! their calls run, and discover what they manage.

use super::*;

pub(super) async fn controllers(b: &RuntimeBackend) -> Result<Vec<ControllerView>, BackendError> {
    let tests = b.inner.node.read(|s| s.controller_tests.clone());
    Ok(b.cfg()
        .config()
        .controllers
        .iter()
        .map(|(id, c)| {
            let mut v = controller_view(id, c);
            if let Some(t) = tests.get(id) {
                // A record this build cannot read shows as untested rather than failing
                // the list.
                v.grades = serde_json::from_value(t.grades.clone()).unwrap_or_default();
                v.tested_at_ms = Some(t.at_unix_ms);
                v.identity.clone_from(&t.identity);
            }
            v
        })
        .collect())
}

pub(super) async fn register_controller(
    b: &RuntimeBackend,
    caller: &Caller,
    c: CheckedController,
) -> Result<ControllerView, BackendError> {
    b.write_guard().await?;
    let name = c.name.clone();
    {
        let _one_writer = b.inner.controller_lock.lock().await;
        let known = b.inner.node.read(|s| s.controllers.contains_key(&name));
        if b.cfg().controller(name.as_str()).is_some() || known {
            return Err(BackendError::Conflict(format!(
                "controller {:?} already exists",
                name.as_str()
            )));
        }
        let record = ControllerRecord {
            id: name.clone(),
            site: c.config.site.clone(),
            reach: c.config.reach.clone(),
            // The spec as sent: secrets appear in it by reference only.
            config: serde_json::to_value(ApiControllerRecord {
                source: API_SOURCE.to_owned(),
                spec: c.spec.clone(),
                registered_by: caller.name.clone(),
            })
            .map_err(|e| BackendError::Unavailable(e.to_string()))?,
        };
        b.inner
            .node
            .write(ClusterCommand::RegisterController { controller: record })
            .await
            .map_err(map_err_cluster)?;
    }
    let cfg = b.cfg();
    let Some(config) = cfg.controller(name.as_str()) else {
        return Err(BackendError::Unavailable(format!(
            "controller {name} was registered but is not in force: {}",
            cfg.dropped.join("; ")
        )));
    };
    b.inner.record(
        NewEvent::new(
            EventKind::Config,
            caller.actor(),
            format!(
                "Registered controller {name} ({}, site {})",
                config.controller_type(),
                config.site
            ),
        )
        .data(json!({"controller": name, "spec": c.spec})),
    );
    tracing::info!(controller = %name, by = %caller.name, "Registered a controller through the API");
    Ok(controller_view(&name, config))
}

pub(super) async fn test_controller(
    b: &RuntimeBackend,
    caller: &Caller,
    name: &ControllerId,
) -> Result<ControllerTest, BackendError> {
    let cfg = b.cfg();
    let Some(config) = cfg.controller(name.as_str()) else {
        return Err(not_found("controller", name.as_str()));
    };
    let (report, how) = b.route_registration(name, config).await?;
    b.inner.record(
        NewEvent::new(
            EventKind::Operator,
            caller.actor(),
            format!("Tested controller {name} at {}", report.orchestrator),
        )
        .data(json!({"passed": report.passed(), "by": report.orchestrator, "route": how})),
    );
    let pinned = b.inner.registered().identity(name).map(str::to_owned);
    let read = report.identity.as_ref().map(|i| i.id.clone());
    let mut warnings = Vec::new();
    if let (Some(old), Some(new)) = (&pinned, &read)
        && old != new
    {
        warnings.push(format!(
            "the identity changed: the previous test read {old}, this one {new}; this test \
             pins {new}, and fences check it from now on"
        ));
    }
    let test = controller_test(name, &report, &how, warnings);
    // The grades go to the replicated state, so every orchestrator lists them: a follower
    // sends its test's record to the leader to write (ADR 0024), as any other write.
    let record = ControllerTestRecord {
        at_unix_ms: b.inner.clock.now().0,
        by: report.orchestrator.clone(),
        grades: serde_json::to_value(&test.grades)
            .map_err(|e| BackendError::Unavailable(e.to_string()))?,
        // A test that could not read the target keeps what was pinned before.
        identity: read.or(pinned),
    };
    let write = ApiWrite::RecordControllerTest {
        name: name.clone(),
        test: record,
    };
    if let Err(e) = b.write(caller, write).await {
        tracing::warn!(controller = %name, error = %e, "Could not record the controller's grades");
    }
    Ok(test)
}

pub(super) async fn probe_controller(
    b: &RuntimeBackend,
    caller: &Caller,
    c: CheckedController,
) -> Result<ControllerTest, BackendError> {
    let cfg = b.cfg();
    if cfg.controller(c.name.as_str()).is_some() {
        return Err(BackendError::Conflict(format!(
            "controller {:?} is registered: test it (POST /api/v1/controllers/{}/test) \
             instead of probing it",
            c.name.as_str(),
            c.name.as_str()
        )));
    }
    // The registration steps read the controller from a configuration: this one is the
    // configuration in force with the candidate added, validated again as a whole.
    let text = plan_api::with_entry(&cfg.text, "controllers", c.name.as_str(), &c.spec, true)
        .map_err(|issues| BackendError::Invalid {
            message: format!(
                "controller {:?} cannot be added to the configuration",
                c.name.as_str()
            ),
            issues,
        })?;
    let loaded = qfence_model::config::load_str(&text, "the configuration").map_err(|issues| {
        BackendError::Invalid {
            message: format!("controller {:?} is not valid", c.name.as_str()),
            issues,
        }
    })?;
    // An unregistered controller has no record in the cluster, so no other orchestrator
    // may be asked to call it: the probe runs here, from a site allowed to call it, or not
    // at all.
    let allowed: Vec<String> = c.config.allowed_sites().map(ToString::to_string).collect();
    if !matches!(
        routing::route(
            &Placement::from(&c.config),
            &b.inner.node.candidates(),
            &b.inner.me
        ),
        Route::Local
    ) {
        return Err(BackendError::Refused(format!(
            "orchestrator {} may not call controller {} (allowed sites: {}): send the probe \
             to an orchestrator at one of those sites, or register the controller and test it",
            b.inner.me,
            c.name,
            allowed.join(", ")
        )));
    }
    let known = b.inner.registered().identities().clone();
    let report = registration::register(Registration {
        config: &loaded.config,
        controller: &c.name,
        orchestrator: &b.inner.me,
        secrets: &b.secrets,
        known: &known,
        timeout: REGISTRATION_TIMEOUT,
    })
    .await;
    b.inner.record(
        NewEvent::new(
            EventKind::Operator,
            caller.actor(),
            format!(
                "Probed controller {} (not registered) at {}",
                c.name, report.orchestrator
            ),
        )
        .data(json!({"passed": report.passed(), "by": report.orchestrator, "controller": c.name})),
    );
    let warnings = c
        .warnings
        .iter()
        .map(|i| format!("{}: {}", i.path, i.message))
        .collect();
    Ok(controller_test(
        &c.name,
        &report,
        "here: this site may call it",
        warnings,
    ))
}

pub(super) async fn discover(
    b: &RuntimeBackend,
    controller: &ControllerId,
) -> Result<Vec<DiscoveredResource>, BackendError> {
    let cfg = b.cfg();
    let Some(config) = cfg.controller(controller.as_str()) else {
        return Err(not_found("controller", controller.as_str()));
    };
    let call = Call::discover(config.site.clone(), REGISTRATION_TIMEOUT);
    let (value, _) = b
        .route_call(controller, config, call, "discovery", || async {
            let known = BTreeMap::new();
            let found = registration::discover(Registration {
                config: &cfg,
                controller,
                orchestrator: &b.inner.me,
                secrets: &b.secrets,
                known: &known,
                timeout: REGISTRATION_TIMEOUT,
            })
            .await?;
            Ok(Answer::Discovered(found))
        })
        .await?;
    let Answer::Discovered(found) = value else {
        return Err(BackendError::Unavailable(format!(
            "the discovery of {controller} came back as {}",
            value.kind()
        )));
    };
    Ok(found
        .into_iter()
        .map(|r| DiscoveredResource {
            capability: r.capability,
            resource: r.resource,
            description: r.description,
        })
        .collect())
}

/// The API's view of a registration report.
fn controller_test(
    name: &ControllerId,
    report: &Report,
    how: &str,
    mut warnings: Vec<String>,
) -> ControllerTest {
    let steps: Vec<RegistrationStep> = report
        .steps
        .iter()
        .map(|s| RegistrationStep {
            number: s.number,
            name: s.name.clone(),
            status: s.status.as_str().to_owned(),
            notes: s.notes.clone(),
        })
        .collect();
    let summary = steps
        .iter()
        .map(|s| {
            format!(
                "{}. {}: {} {}",
                s.number,
                s.name,
                s.status,
                s.notes.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    warnings.extend(report.warnings.iter().cloned());
    ControllerTest {
        controller: name.to_string(),
        reachable: report.identity.is_some(),
        identity: report.identity.as_ref().map(|i| i.id.clone()),
        grades: report
            .grades
            .iter()
            .map(|g| CapabilityGrade {
                capability: g.capability.clone(),
                grade: g.grade.into(),
                detail: g.reason.clone(),
            })
            .collect(),
        message: format!("Run by {} ({how}). {summary}", report.orchestrator),
        tls_fingerprint: report
            .identity
            .as_ref()
            .and_then(|i| i.tls_fingerprint.clone()),
        facts: report
            .identity
            .as_ref()
            .map(|i| i.facts.clone())
            .unwrap_or_default(),
        warnings,
        steps,
    }
}

/// Writes a controller's test `record` into the replicated state (on the leader).
pub(super) async fn record_test(
    b: &RuntimeBackend,
    name: &ControllerId,
    record: ControllerTestRecord,
) -> Result<(), BackendError> {
    b.inner
        .node
        .write(ClusterCommand::RecordControllerTest {
            controller: name.clone(),
            test: record,
        })
        .await
        .map(|_| ())
        .map_err(|e| BackendError::Unavailable(format!("the grades were not recorded: {e}")))
}
