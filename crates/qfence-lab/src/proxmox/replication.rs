//! Storage replication: the jobs that run on their own, and their API.

use super::*;

// ---------------------------------------------------------------------------------------
// Replication

pub(super) async fn replicate_forever(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        replicate_due(&shared, Instant::now());
    }
}

/// Runs every job whose time has come. A sync takes no simulated time; its `duration` is
/// a plausible constant.
pub(super) fn replicate_due(shared: &Shared, now: Instant) {
    let mut state = shared.lock();
    let mut due = shared.due.lock().unwrap_or_else(|p| p.into_inner());
    let mut flaps = shared
        .flap_position
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let epoch = shared.clock.epoch_at(now);
    let nodes: BTreeMap<String, bool> = state
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.online()))
        .collect();
    let remote = state.remote_nodes.clone();
    let placement: BTreeMap<u32, String> =
        state.vms.iter().map(|v| (v.vmid, v.node.clone())).collect();
    for job in state.replication.iter_mut().filter(|j| !j.disable) {
        let when = *due.entry(job.id.clone()).or_insert(now);
        if now < when {
            continue;
        }
        let Some(source) = placement.get(&job.guest) else {
            continue;
        };
        // A dead source node runs nothing and records nothing.
        if !nodes.get(source).copied().unwrap_or(false) {
            continue;
        }
        let target_up = nodes
            .get(&job.target)
            .or_else(|| remote.get(&job.target))
            .copied()
            .unwrap_or(false);
        let flapping_fails = job.flapping.is_some_and(|f| {
            let position = flaps.entry(job.id.clone()).or_insert(0);
            let cycle = (f.fail + f.succeed).max(1);
            let fails = *position % cycle < f.fail;
            *position += 1;
            fails
        });
        job.status.last_try = epoch;
        let error = if !target_up || !job.link_up {
            Some(format!(
                "command '/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias={t}' root@{t} -- pvesr prepare-local-job {id} --scan local-lvm --last_sync {last}' failed: exit code 255",
                t = job.target,
                id = job.id,
                last = job.status.last_sync
            ))
        } else if flapping_fails {
            Some(format!(
                "command 'zfs recv -F -- rpool/data/vm-{g}-disk-0' failed: exit code 1",
                g = job.guest
            ))
        } else {
            None
        };
        match error {
            None => {
                job.status.last_sync = epoch;
                job.status.duration = 1.52;
                job.status.fail_count = 0;
                job.status.error = None;
                due.insert(job.id.clone(), now + job.interval);
            }
            Some(error) => {
                job.status.fail_count += 1;
                job.status.error = Some(error);
                // PVE retries after 5 min × fail_count, at most 30 min; here one interval
                // stands for 5 min.
                let backoff = job.interval * job.status.fail_count.min(6);
                due.insert(job.id.clone(), now + backoff);
            }
        }
    }
}

/// A job's configuration; `source` is the node its guest lives on (looked up by the caller,
/// which for a listing of thousands of jobs looks each up in a map, not in the VM list).
pub(super) fn job_config(source: Option<&str>, job: &ReplicationJob) -> Value {
    let mut out = json!({
        "id": job.id,
        "type": "local",
        "guest": job.guest,
        "jobnum": job.jobnum(),
        "target": job.target,
        "schedule": job.schedule,
    });
    if let Some(node) = source {
        out["source"] = json!(node);
    }
    if job.disable {
        out["disable"] = json!(1);
    }
    out
}

pub(super) fn job_status(shared: &Shared, source: Option<&str>, job: &ReplicationJob) -> Value {
    let mut out = job_config(source, job);
    let s = &job.status;
    out["vmtype"] = json!("qemu");
    out["last_sync"] = json!(s.last_sync);
    out["last_try"] = json!(s.last_try);
    out["duration"] = json!(s.duration);
    out["fail_count"] = json!(s.fail_count);
    if let Some(error) = &s.error {
        out["error"] = json!(error);
    }
    if !job.disable {
        let due = shared
            .due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&job.id)
            .copied();
        if let Some(due) = due {
            out["next_sync"] = json!(shared.clock.epoch_at(due));
        }
    }
    out
}

pub(super) async fn replication_config(State(shared): Shr, Authed(caller): Authed) -> Response {
    let state = shared.lock();
    let out: Vec<Value> = state
        .replication
        .iter()
        .filter(|j| allowed(&state, &caller, &format!("/vms/{}", j.guest), "VM.Audit"))
        .map(|j| job_config(state.vm(j.guest).map(|v| v.node.as_str()), j))
        .collect();
    data(Value::Array(out))
}

pub(super) async fn replication_config_one(
    State(shared): Shr,
    Authed(caller): Authed,
    Path(id): Path<String>,
) -> Response {
    let state = shared.lock();
    let Some(job) = state.job(&id) else {
        return pve_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("replication job '{id}' does not exist"),
        );
    };
    let path = format!("/vms/{}", job.guest);
    if !allowed(&state, &caller, &path, "VM.Audit") {
        return forbidden(&path, "VM.Audit");
    }
    data(job_config(
        state.vm(job.guest).map(|v| v.node.as_str()),
        job,
    ))
}

pub(super) async fn replication_status_list(
    State(shared): Shr,
    CountedRead(caller, _): CountedRead<JobListing>,
    Path(node): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let state = shared.lock();
    if let Err(r) = reach_node(&state, &node) {
        return r;
    }
    let guest: Option<u32> = query.get("guest").and_then(|g| g.parse().ok());
    // Only jobs whose guest lives on this node: the state file is local to it.
    let homes: std::collections::HashMap<u32, &str> = state
        .vms
        .iter()
        .map(|v| (v.vmid, v.node.as_str()))
        .collect();
    let out: Vec<Value> = state
        .replication
        .iter()
        .filter(|j| homes.get(&j.guest) == Some(&node.as_str()))
        .filter(|j| guest.is_none_or(|g| g == j.guest))
        .filter(|j| allowed(&state, &caller, &format!("/vms/{}", j.guest), "VM.Audit"))
        .map(|j| job_status(&shared, Some(node.as_str()), j))
        .collect();
    data(Value::Array(out))
}

pub(super) fn local_job<'a>(
    state: &'a PveState,
    node: &str,
    id: &str,
) -> Result<&'a ReplicationJob, Response> {
    state
        .job(id)
        .filter(|j| state.vm(j.guest).is_some_and(|v| v.node == node))
        .ok_or_else(|| {
            pve_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("no such replication job '{id}'"),
            )
        })
}

/// The replication job `id` of `node`, checked in PVE's order: the node answers, the job is
/// local to it, the caller holds `privilege` on its guest.
fn permitted_job<'a>(
    state: &'a PveState,
    caller: &Principal,
    node: &str,
    id: &str,
    privilege: &str,
) -> Result<&'a ReplicationJob, Response> {
    reach_node(state, node)?;
    let job = local_job(state, node, id)?;
    let path = format!("/vms/{}", job.guest);
    if !allowed(state, caller, &path, privilege) {
        return Err(forbidden(&path, privilege));
    }
    Ok(job)
}

pub(super) async fn replication_status_one(
    State(shared): Shr,
    CountedRead(caller, _): CountedRead<JobStatus>,
    Path((node, id)): Path<(String, String)>,
) -> Response {
    let state = shared.lock();
    let job = match permitted_job(&state, &caller, &node, &id, "VM.Audit") {
        Ok(job) => job,
        Err(r) => return r,
    };
    data(job_status(&shared, Some(node.as_str()), job))
}

pub(super) async fn replication_schedule_now(
    State(shared): Shr,
    Authed(caller): Authed,
    Path((node, id)): Path<(String, String)>,
) -> Response {
    {
        let state = shared.lock();
        if let Err(r) = permitted_job(&state, &caller, &node, &id, "VM.Replicate") {
            return r;
        }
    }
    shared
        .due
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), Instant::now());
    let task = new_task(&shared, &node, "replicate", &id, &caller);
    let upid = task.upid.clone();
    let mut finished = task;
    finished.endtime = Some(finished.starttime);
    finished.exitstatus = Some("OK".to_owned());
    finished.log.push("TASK OK".to_owned());
    shared.lock().tasks.push(finished);
    data(json!(upid))
}
