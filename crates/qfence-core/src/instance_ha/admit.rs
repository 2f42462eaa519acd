//! Taking failed hosts on (steps 1 to 7 of the seed): eligible by the evacuable tags, enabled,
//! past the gates, with a fence binding, within the per-cycle cap; and adopting a host a qfence
//! without its state had disabled.

use std::collections::BTreeMap;

use qfence_model::config::HostName;

use super::gates::{self, Closed};
use super::host::tagged;
use super::reason::Note;
use super::snapshot::ServiceStatus;
use super::state::{FenceTrack, HostPhase, HostRecord};
use super::types::{DisableReason, EventKind};
use super::{Cx, Mutation};
use crate::types::Millis;

impl Cx<'_, '_> {
    /// Whether tags are in use for servers: any flavor or image tagged evacuable.
    pub(super) fn server_tags_in_use(&self) -> bool {
        let key = &self.cloud.evacuable_tag;
        let nova = self.s.nova;
        nova.flavors.values().any(|m| tagged(Some(m), key))
            || nova.images.values().any(|m| tagged(Some(m), key))
    }

    /// Whether a server is one to evacuate: in a status Nova evacuates, and tagged when tags
    /// are in use (step 1 and step 8's note).
    pub(super) fn server_evacuable(&self, srv: &super::Server, tags: bool) -> bool {
        srv.status.evacuable() && (!tags || self.server_tagged(srv))
    }

    /// Whether a server's flavor or image is tagged evacuable.
    pub(super) fn server_tagged(&self, srv: &super::Server) -> bool {
        let key = &self.cloud.evacuable_tag;
        let nova = self.s.nova;
        tagged(nova.flavors.get(&srv.flavor), key)
            || srv
                .image
                .as_ref()
                .is_some_and(|i| tagged(nova.images.get(i), key))
    }

    /// Step 1: a host is eligible when it has servers; when tags are in use, servers with a
    /// tagged flavor or image; when aggregates are tagged, when it is in one of them.
    pub(super) fn eligible(&self, host: &HostName) -> bool {
        let nova = self.s.nova;
        let key = &self.cloud.evacuable_tag;
        let tags = self.server_tags_in_use();
        let mut servers = nova.servers_on(host).peekable();
        if servers.peek().is_none() {
            return false;
        }
        if tags && !nova.servers_on(host).any(|s| self.server_tagged(s)) {
            return false;
        }
        let tagged_aggregates: Vec<_> = nova
            .aggregates
            .iter()
            .filter(|a| tagged(Some(&a.metadata), key))
            .collect();
        tagged_aggregates.is_empty() || tagged_aggregates.iter().any(|a| a.hosts.contains(host))
    }

    /// Fences started in this poll, against `max_hosts_per_cycle`.
    pub(super) fn cap_left(&self) -> u32 {
        let used = if self.mutation() == Mutation::CapPerDecision {
            self.fenced_now.len()
        } else {
            let poll = Some(self.s.nova.read_at);
            self.state
                .hosts
                .values()
                .filter(|r| r.fence.last_poll == poll)
                .count()
        };
        self.cloud
            .max_hosts_per_cycle
            .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX))
    }

    /// New failed hosts: eligible, enabled (a disabled host is not failed), not blocked by a
    /// gate, with a fence binding; then kdump wait or their fence, within the per-cycle cap.
    pub(super) fn admit(&mut self) {
        let mut candidates: Vec<(Millis, HostName)> = self
            .state
            .failed
            .iter()
            .filter(|(h, _)| !self.state.hosts.contains_key(*h))
            .map(|(h, t)| (*t, h.clone()))
            .collect();
        candidates.sort();
        let unfenceable: Vec<HostName> = self
            .state
            .unfenceable
            .iter()
            .filter(|h| !self.state.failed.contains_key(*h) || self.state.hosts.contains_key(*h))
            .cloned()
            .collect();
        for h in unfenceable {
            self.change().unfenceable.remove(&h);
        }
        let mut blocked: Vec<(Closed, Vec<HostName>)> = Vec::new();
        let mut deferred = Vec::new();
        for (detected, h) in candidates {
            if !self.eligible(&h) {
                continue;
            }
            let site = self.site_of.get(&h).cloned();
            if let Some(c) = self.gates.closed_for(&h, site.as_ref()) {
                match blocked.iter_mut().find(|(b, _)| *b == c) {
                    Some((_, v)) => v.push(h),
                    None => blocked.push((c, vec![h])),
                }
                continue;
            }
            if let Err(why) = self.s.config.host_fence(self.cloud, &h) {
                self.notes.push(Note::no_fence(h.clone(), &why));
                if !self.state.unfenceable.contains(&h) {
                    self.change().unfenceable.insert(h.clone());
                    self.event(
                        Some(&h),
                        EventKind::NoFence {
                            why: why.to_string(),
                        },
                    );
                }
                continue;
            }
            let Some(site) = site else { continue };
            if !self.cloud.check_kdump && self.cap_left() == 0 {
                deferred.push(h);
                continue;
            }
            let phase = if self.cloud.check_kdump {
                HostPhase::KdumpWait
            } else {
                HostPhase::Fencing
            };
            self.take_on(&h, site, detected, phase);
            self.drive_phase(&h);
        }
        for (c, hosts) in blocked {
            self.notes.push(Note::blocked(hosts, &c));
        }
        if !deferred.is_empty() {
            self.notes.push(Note::Deferred {
                hosts: deferred,
                cap: self.cloud.max_hosts_per_cycle,
            });
        }
    }

    pub(super) fn take_on(
        &mut self,
        host: &HostName,
        site: qfence_model::SiteId,
        detected: Millis,
        phase: HostPhase,
    ) {
        let now = self.now();
        let term = self.s.leadership.term;
        let st = self.change();
        st.generation = st.generation.next();
        let incident = st.generation;
        st.hosts.insert(
            host.clone(),
            HostRecord {
                incident,
                detected,
                site,
                phase,
                phase_since: now,
                term,
                pending: BTreeMap::new(),
                done: Default::default(),
                fence: FenceTrack::default(),
                kdump: false,
                reserved: None,
                reserve_tried: false,
                disable_reason: None,
                servers: BTreeMap::new(),
                retry_at: None,
                power_attempts: 0,
            },
        );
    }

    /// A host disabled with qfence's "evacuating" reason, with no record, not reporting: a
    /// qfence that lost its state was processing it. Its fence is read back first; it is
    /// fenced again only if that reads it on.
    pub(super) fn adopt_orphans(&mut self) {
        let nova = self.s.nova;
        let orphans: Vec<HostName> = nova
            .computes
            .iter()
            .filter(|c| {
                c.status == ServiceStatus::Disabled
                    && c.disabled_reason
                        .as_deref()
                        .is_some_and(DisableReason::marks_evacuating)
                    && !self.state.hosts.contains_key(&c.host)
                    && !gates::reports(c, nova.read_at, self.cloud)
            })
            .map(|c| c.host.clone())
            .collect();
        for h in orphans {
            let Some(site) = self.site_of.get(&h).cloned() else {
                continue;
            };
            self.notes.push(Note::Adopted { host: h.clone() });
            let now = self.now();
            self.take_on(&h, site, now, HostPhase::Verifying);
            // Readings from now on count, as if its fence had started now.
            self.rec(&h).fence.started = Some(now);
            self.rec(&h).fence.last_at = Some(now);
            self.drive_phase(&h);
        }
    }
}
