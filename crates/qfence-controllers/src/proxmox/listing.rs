//! Listings shared by many checks: a node's VMs and replication jobs, and where the
//! cluster says a guest lives.

use super::*;

impl<T> Default for SharedListing<T> {
    fn default() -> Self {
        Self {
            gate: Arc::new(tokio::sync::Mutex::new(())),
            latest: Mutex::new(None),
            last_ok: Mutex::new(None),
        }
    }
}

impl<T: Send + Sync + 'static> SharedListing<T> {
    /// The listing of `node` in `lists`.
    pub(super) fn of(lists: &Lists<T>, node: &str) -> Arc<Self> {
        lists
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.to_owned())
            .or_default()
            .clone()
    }

    /// A listing sent at or after `since` (any listing if `None`): one that is (or was) in
    /// flight, or a new one made by `fetch` in a task of its own. With when it was sent.
    pub(super) async fn read<F>(
        self: &Arc<Self>,
        owner: &ControllerId,
        since: Option<tokio::time::Instant>,
        fetch: F,
    ) -> (tokio::time::Instant, Listed<T>)
    where
        F: std::future::Future<Output = Result<T, DriverError>> + Send + 'static,
    {
        let usable = || {
            let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
            latest
                .as_ref()
                .filter(|(sent, _)| since.is_none_or(|since| *sent >= since))
                .map(|(sent, listed)| (*sent, listed.clone()))
        };
        if let Some(found) = usable() {
            return found;
        }
        let turn = self.gate.clone().lock_owned().await;
        if let Some(found) = usable() {
            return found;
        }
        let me = self.clone();
        let task = tokio::spawn(async move {
            // The turn goes with the task: no second listing starts while this one runs.
            let _turn = turn;
            let sent = tokio::time::Instant::now();
            let listed = fetch.await.map(Arc::new);
            if let Ok(ok) = &listed {
                *me.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = Some(ok.clone());
            }
            *me.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some((sent, listed.clone()));
            (sent, listed)
        });
        let started = tokio::time::Instant::now();
        task.await.unwrap_or_else(|e| {
            let failed = format!("the listing's task failed: {e}");
            (
                started,
                Err(DriverError::new(
                    ErrorKind::Protocol,
                    owner,
                    "listing",
                    failed,
                    false,
                )),
            )
        })
    }

    /// The last listing that succeeded, if any.
    pub(super) fn last_ok(&self) -> Option<Arc<T>> {
        self.last_ok
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The fields of a `cluster/resources` row that say where a guest lives.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ListedGuest {
    #[serde(default)]
    pub(super) vmid: Value,
    #[serde(default)]
    pub(super) node: Option<String>,
}

/// The fields of a replication job's status (a listing's row, or the job's own `status`) that
/// a reading needs; loose, as PVE's are, so any object reads.
#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct ListedJob {
    #[serde(default)]
    pub(super) id: Value,
    #[serde(default)]
    pub(super) last_sync: Value,
    #[serde(default)]
    pub(super) fail_count: Value,
    #[serde(default)]
    pub(super) error: Value,
}

impl ListedJob {
    /// The sample this status makes, read from `source` at `read_at`; `None` without a
    /// `last_sync`, which every real PVE status carries.
    pub(super) fn sample(&self, source: &str, read_at: u64) -> Option<ReplicationSample> {
        Some(ReplicationSample {
            last_sync: loose_u64(&self.last_sync)?,
            fail_count: loose_u64(&self.fail_count).unwrap_or(0),
            error: self
                .error
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            source: source.to_owned(),
            read_at,
        })
    }
}

/// The fields of a VM listing's row that a reading needs (a row has twenty more, which
/// are not built at all: a listing of thousands of VMs is read many times a second).
#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct ListedVm {
    #[serde(default)]
    pub(super) vmid: Value,
    #[serde(default)]
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) qmpstatus: Option<String>,
    #[serde(default)]
    pub(super) lock: Option<String>,
}

impl Inner {
    /// The row of VM `vmid` in a listing of `node` (`GET /nodes/{node}/qemu?full=1`, which PVE
    /// answers from the live VM state, as it does `status/current`) that was sent after this
    /// call began: a reading as fresh as asking the VM alone. Checks of many VMs on one node
    /// share listings: while one is in flight, the checks that arrive wait for it to end and
    /// then for the next, which one of them sends. So 5,000 plans' VM checks cost a few
    /// listings per round, not 5,000 requests. `None`: the VM is not in the listing.
    pub(super) async fn listed_vm(
        &self,
        node: &str,
        vmid: u32,
    ) -> Result<Option<ListedVm>, DriverError> {
        let arrived = tokio::time::Instant::now();
        let listing = SharedListing::of(&self.vm_lists, node);
        let (inner, path) = (self.shared(), format!("nodes/{node}/qemu"));
        let fetch = async move {
            let rows: Vec<ListedVm> = inner.list(&path, &[("full", "1")]).await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| Some((loose_u64(&r.vmid)?, r)))
                .collect())
        };
        let (_, listed) = listing.read(&self.id, Some(arrived), fetch).await;
        Ok(listed?.get(&u64::from(vmid)).cloned())
    }

    /// The status of replication job `job` from a listing of `node`'s jobs
    /// (`GET /nodes/{node}/replication`, the same fields as the job's own `status`) sent
    /// after this call began, shared as [`Self::listed_vm`] shares VM listings. `None`: the
    /// node has no such job (its guest lives elsewhere, or the job does not exist).
    pub(super) async fn listed_job(
        &self,
        node: &str,
        job: &str,
    ) -> Result<Option<ListedJob>, DriverError> {
        let arrived = tokio::time::Instant::now();
        let listing = SharedListing::of(&self.job_lists, node);
        let (inner, path) = (self.shared(), format!("nodes/{node}/replication"));
        let fetch = async move {
            let rows: Vec<ListedJob> = inner.list(&path, &[]).await?;
            Ok(rows
                .into_iter()
                .filter_map(|r| Some((r.id.as_str()?.to_owned(), r)))
                .collect())
        };
        let (_, listed) = listing.read(&self.id, Some(arrived), fetch).await;
        Ok(listed?.get(job).cloned())
    }

    /// A GET whose `data` is a list of `T`, parsed straight from the body.
    pub(super) async fn list<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Vec<T>, DriverError> {
        let raw = self.call_raw(Method::GET, path, query, &[]).await?;
        serde_json::from_slice::<Envelope<Vec<T>>>(&raw.body)
            .map(|e| e.data)
            .map_err(|e| {
                self.err(
                    ErrorKind::Protocol,
                    &format!("GET /{path}"),
                    format!("not a list: {e}"),
                    false,
                )
            })
    }
}

impl Inner {
    /// The node the guest of a job lives on, from the cluster resources, and whether it came
    /// from an earlier listing: from a listing younger than [`GUEST_NODES_TTL`] that names the
    /// guest (unless `relist`), else from a new one. A listing that fails falls back on the
    /// last good one's answer, if it had one (the job's status call then says whether that
    /// node still answers for it).
    pub(super) async fn guest_node(
        &self,
        vmid: &str,
        relist: bool,
    ) -> Result<Option<(String, bool)>, DriverError> {
        let now = tokio::time::Instant::now();
        let fetch = || {
            let inner = self.shared();
            async move {
                let rows: Vec<ListedGuest> =
                    inner.list("cluster/resources", &[("type", "vm")]).await?;
                Ok(rows
                    .into_iter()
                    .filter_map(|r| Some((loose_u64(&r.vmid)?.to_string(), r.node?)))
                    .collect::<HashMap<String, String>>())
            }
        };
        // `None` (any listing) while the process is younger than the TTL.
        let young = if relist {
            Some(now)
        } else {
            now.checked_sub(GUEST_NODES_TTL)
        };
        let (mut sent, mut listed) = self.guests.read(&self.id, young, fetch()).await;
        // A young listing without the guest: the guest may be new; list again once.
        if !relist
            && sent < now
            && let Ok(map) = &listed
            && !map.contains_key(vmid)
        {
            (sent, listed) = self.guests.read(&self.id, Some(now), fetch()).await;
        }
        match listed {
            Ok(map) => Ok(map.get(vmid).map(|n| (n.clone(), sent < now))),
            Err(e) => match self.guests.last_ok().and_then(|m| m.get(vmid).cloned()) {
                Some(node) => Ok(Some((node, true))),
                None => Err(e),
            },
        }
    }
}
