//! HA: a change is done once the cluster's members are in sync.

use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

impl FortigateDriver {
    /// Reads the FGCP members' configuration checksums (`monitor/system/ha-checksums`).
    pub(super) async fn ha_sync(&self) -> Result<HaSync, DriverError> {
        let path = "api/v2/monitor/system/ha-checksums";
        let a = self.send(Method::GET, path, None).await?;
        if matches!(a.status.as_u16(), 403 | 404) {
            return Ok(HaSync::Unreadable(a.status.as_u16()));
        }
        if !a.status.is_success() {
            self.ok(Method::GET, path, None).await?;
        }
        let members = a
            .body
            .get("results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if members.len() <= 1 {
            return Ok(HaSync::Standalone);
        }
        let mut sums: Vec<String> = members
            .iter()
            .map(|m| {
                m.pointer("/checksum/all")
                    .map(Value::to_string)
                    .unwrap_or_default()
            })
            .collect();
        sums.sort();
        sums.dedup();
        Ok(if sums.len() == 1 {
            HaSync::InSync(members.len())
        } else {
            HaSync::OutOfSync(members.len())
        })
    }

    /// After a write: waits until every HA member has the new configuration, so a failover of
    /// the firewall right after cannot bring back the old one. Bounded by the call's deadline.
    pub(super) async fn wait_ha_sync(&self) -> Result<(), DriverError> {
        while let HaSync::OutOfSync(_) = self.ha_sync().await? {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// A reading of this unit, completed by the HA state: out-of-sync peers mean it does not
    /// hold yet. The HA state is one read after `r` was answered, shared with the other reads
    /// waiting for one ([`HaShare`]).
    pub(super) async fn with_ha(&self, mut r: Reading) -> Result<Reading, DriverError> {
        match self.shared_ha_sync().await? {
            HaSync::Standalone => {}
            HaSync::InSync(n) => r.detail.push_str(&format!("; {n} HA members in sync")),
            HaSync::OutOfSync(n) => {
                r.detail
                    .push_str(&format!("; {n} HA members, not all in sync yet"));
                r.holds = false;
            }
            HaSync::Unreadable(code) => r
                .detail
                .push_str(&format!("; HA sync state unreadable (HTTP {code})")),
        }
        Ok(r)
    }

    /// An HA state read after this call: one that started after the call did, or a new one.
    /// One read at a time; every read waiting while one runs takes the next, so checks of a
    /// thousand VIPs at once read the checksums a few times, not a thousand.
    async fn shared_ha_sync(&self) -> Result<HaSync, DriverError> {
        let after = self.ha.started.load(Ordering::SeqCst);
        let mut last = self.ha.last.lock().await;
        if let Some((n, sync)) = *last
            && n > after
        {
            return Ok(sync);
        }
        let n = self.ha.started.fetch_add(1, Ordering::SeqCst) + 1;
        let sync = self.ha_sync().await?;
        *last = Some((n, sync));
        Ok(sync)
    }
}

/// The HA readings shared by a driver's reads: how many were started, and the last one
/// answered with its number.
#[derive(Debug, Default)]
pub(super) struct HaShare {
    started: AtomicU64,
    last: tokio::sync::Mutex<Option<(u64, HaSync)>>,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum HaSync {
    Standalone,
    InSync(usize),
    OutOfSync(usize),
    Unreadable(u16),
}
