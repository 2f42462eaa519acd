//! Reading a replication job's lag from the node its guest lives on, with the
//! sample cache that keeps ageing while the source does not answer.

use super::*;

impl Inner {
    pub(super) async fn read_replication(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        let job = target.resource.as_str();
        let limit = |k: &str, d: u64| -> Result<u64, DriverError> {
            target.param(ControllerType::Proxmox, k).map_or(Ok(d), |v| {
                v.parse().map_err(|_| {
                    self.err(
                        ErrorKind::Rejected,
                        LAG,
                        format!("params.{k}: {v:?} is not a whole number"),
                        false,
                    )
                })
            })
        };
        let max_age = limit("max_age_seconds", DEFAULT_MAX_AGE_SECONDS)?;
        let max_fail = limit("max_fail_count", DEFAULT_MAX_FAIL_COUNT)?;
        let Some((vmid, _)) = job.split_once('-') else {
            return Err(self.err(
                ErrorKind::Rejected,
                LAG,
                format!("{job:?} is not a replication job id"),
                false,
            ));
        };
        let cached = self
            .replication
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(job)
            .cloned();
        let fresh = self.fresh_sample(job, vmid);
        // With a cached sample in hand, a source that does not answer within half of the
        // remaining time is treated as gone: a powered-off host drops packets rather than
        // refusing, and waiting for the call's own deadline would leave no time for the
        // cache. Without one there is nothing better to wait for.
        let fresh = match &cached {
            Some(_) => {
                let now = tokio::time::Instant::now();
                let until = now + ctx.deadline.saturating_duration_since(now) / 2;
                tokio::time::timeout_at(until, fresh)
                    .await
                    .unwrap_or_else(|_| {
                        Err(self.err(
                            ErrorKind::Timeout,
                            LAG,
                            format!("the status of job {job} did not come in time"),
                            false,
                        ))
                    })
            }
            None => fresh.await,
        };
        let (sample, from_cache) = match fresh {
            Ok(s) => {
                self.replication
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(job.to_owned(), s.clone());
                (s, false)
            }
            // The source node is gone: its status cannot be read any more.
            Err(e) if matches!(e.kind, ErrorKind::Unreachable | ErrorKind::Timeout) => match cached
            {
                Some(s) => (s, true),
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let (holds, detail) =
            assess_replication(job, &sample, now_epoch(), max_age, max_fail, from_cache);
        Ok(ctx.reading(holds, detail))
    }

    /// A new sample of job `job` (of guest `vmid`), read from the node the guest lives on:
    /// from the node's shared listing of jobs, else from the job's own status (which says
    /// why it is not listed). A refusal by a remembered node may only mean the guest moved:
    /// the guests are listed again once.
    async fn fresh_sample(&self, job: &str, vmid: &str) -> Result<ReplicationSample, DriverError> {
        let mut relist = false;
        loop {
            let node = match self.guest_node(vmid, relist).await? {
                Some((n, remembered)) => {
                    // A refusal by a remembered node may only mean the guest moved.
                    relist = !relist && remembered;
                    n
                }
                None => {
                    return Err(self.err(
                        ErrorKind::Rejected,
                        LAG,
                        format!(
                            "guest {vmid} of job {job} is not visible (missing, or no VM.Audit)"
                        ),
                        false,
                    ));
                }
            };
            // Not in the node's listing: the job's own status says why (and a refusal by
            // a remembered node may only mean the guest moved: list guests again).
            // The status, or (what was read instead) in words for the error.
            let sample = match self.listed_job(&node, job).await? {
                Some(row) => row
                    .sample(&node, now_epoch())
                    .ok_or_else(|| format!("{row:?}")),
                None => match self
                    .get(&format!("nodes/{node}/replication/{job}/status"), &[])
                    .await
                {
                    Ok(d) => parse_replication_status(&d, &node, now_epoch())
                        .ok_or_else(|| d.to_string()),
                    Err(e) if e.kind == ErrorKind::Rejected && relist => continue,
                    Err(e) => return Err(e),
                },
            };
            return sample.map_err(|shown| {
                self.err(
                    ErrorKind::Protocol,
                    LAG,
                    format!("the status of job {job} on {node} has no last_sync: {shown}"),
                    false,
                )
            });
        }
    }
}
