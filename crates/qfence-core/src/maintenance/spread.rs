//! Where agents go: CloudStack's `indirect.agent.lb.algorithm`, as a pure function.
//!
//! Each agent gets an ordered list of orchestrators (the first is where it connects; it falls
//! back down the list) drawn from its candidates: the orchestrators it is allowed to use that
//! are `Up`, alive, and not to be avoided.
//!
//! - `static`: every agent gets its candidates in its configured order, so all of them go to
//!   the first one that is left (predictable; the operator's order is a preference).
//! - `roundrobin`: each agent goes to the candidate that received the fewest so far in this
//!   operation (ties in a rotating order), the rest of the list rotated after it. Agents that
//!   share one candidate set are spread with no orchestrator more than one above another.
//! - `shuffle`: each agent's list is a random permutation, drawn from the injected seed and the
//!   agent's name, so a replay with the same seed gives the same lists.

use std::collections::BTreeMap;

pub use qfence_model::AgentAlgorithm;
use qfence_model::OrchestratorId;
use qfence_model::config::HostName;

/// Spreads agents, in name order, over their candidates. `received` counts what each
/// orchestrator already received in this operation (roundrobin continues from it, batch after
/// batch); it is updated. An agent without a candidate gets an empty list.
pub fn spread(
    algorithm: AgentAlgorithm,
    agents: &BTreeMap<HostName, Vec<OrchestratorId>>,
    received: &mut BTreeMap<OrchestratorId, usize>,
    seed: u64,
) -> BTreeMap<HostName, Vec<OrchestratorId>> {
    let mut out = BTreeMap::new();
    for (agent, candidates) in agents {
        let list = match algorithm {
            AgentAlgorithm::Static => candidates.clone(),
            AgentAlgorithm::RoundRobin => round_robin(candidates, received),
            AgentAlgorithm::Shuffle => shuffled(candidates, seed ^ fnv(agent.as_str())),
        };
        if let Some(first) = list.first() {
            *received.entry(first.clone()).or_default() += 1;
        }
        out.insert(agent.clone(), list);
    }
    out
}

/// The least-received candidate first (ties: the rotation the total so far points at), then
/// the others in rotated order.
fn round_robin(
    candidates: &[OrchestratorId],
    received: &BTreeMap<OrchestratorId, usize>,
) -> Vec<OrchestratorId> {
    if candidates.is_empty() {
        return Vec::new();
    }
    let count = |o: &OrchestratorId| received.get(o).copied().unwrap_or(0);
    let total: usize = candidates.iter().map(count).sum();
    let n = candidates.len();
    let rotated: Vec<&OrchestratorId> = (0..n).map(|i| &candidates[(total + i) % n]).collect();
    let first = rotated
        .iter()
        .enumerate()
        .min_by_key(|(i, o)| (count(o), *i))
        .map(|(i, _)| i)
        .unwrap_or(0);
    (0..n)
        .map(|i| rotated[(first + i) % n].clone())
        .collect::<Vec<_>>()
}

/// A Fisher-Yates shuffle driven by splitmix64 from `seed`.
fn shuffled(candidates: &[OrchestratorId], seed: u64) -> Vec<OrchestratorId> {
    let mut v = candidates.to_vec();
    let mut state = seed;
    for i in (1..v.len()).rev() {
        let j = (splitmix(&mut state) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a: a stable hash of a name (the standard library's is not stable across releases).
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> OrchestratorId {
        OrchestratorId::new(s).unwrap()
    }

    fn agents(n: usize, cands: &[&str]) -> BTreeMap<HostName, Vec<OrchestratorId>> {
        (0..n)
            .map(|i| {
                (
                    HostName::new(format!("h{i:04}")).unwrap(),
                    cands.iter().map(|c| o(c)).collect(),
                )
            })
            .collect()
    }

    fn firsts(m: &BTreeMap<HostName, Vec<OrchestratorId>>) -> BTreeMap<OrchestratorId, usize> {
        let mut c = BTreeMap::new();
        for l in m.values() {
            *c.entry(l[0].clone()).or_default() += 1;
        }
        c
    }

    #[test]
    fn roundrobin_gives_no_orchestrator_more_than_its_share_by_more_than_one() {
        for n in [1, 2, 7, 100, 301] {
            for k in 1..=5 {
                let names: Vec<String> = (0..k).map(|i| format!("o{i}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                // In batches of 7, as the bounded rate sends them.
                let all = agents(n, &refs);
                let mut received = BTreeMap::new();
                let mut got = BTreeMap::new();
                let keys: Vec<_> = all.keys().cloned().collect();
                for chunk in keys.chunks(7) {
                    let batch = chunk.iter().map(|h| (h.clone(), all[h].clone())).collect();
                    got.extend(spread(AgentAlgorithm::RoundRobin, &batch, &mut received, 0));
                }
                let c = firsts(&got);
                let share = n / k;
                for name in &names {
                    let v = c.get(&o(name)).copied().unwrap_or(0);
                    assert!(v == share || v == share + 1, "{n} over {k}: {c:?}");
                }
                assert_eq!(received, c);
            }
        }
    }

    #[test]
    fn static_sends_everyone_to_the_first_candidate_and_keeps_the_order() {
        let m = spread(
            AgentAlgorithm::Static,
            &agents(10, &["o2", "o1"]),
            &mut BTreeMap::new(),
            9,
        );
        assert!(m.values().all(|l| l == &vec![o("o2"), o("o1")]));
    }

    #[test]
    fn shuffle_is_a_permutation_reproducible_from_its_seed_and_spreads() {
        let a = agents(300, &["o1", "o2", "o3"]);
        let one = spread(AgentAlgorithm::Shuffle, &a, &mut BTreeMap::new(), 42);
        let again = spread(AgentAlgorithm::Shuffle, &a, &mut BTreeMap::new(), 42);
        let other = spread(AgentAlgorithm::Shuffle, &a, &mut BTreeMap::new(), 43);
        assert_eq!(one, again);
        assert_ne!(one, other);
        for l in one.values() {
            let mut s = l.clone();
            s.sort();
            assert_eq!(s, vec![o("o1"), o("o2"), o("o3")]);
        }
        // Random, not balanced: each still gets a fair part of 300.
        assert!(
            firsts(&one).values().all(|v| (60..=140).contains(v)),
            "{one:?}"
        );
    }

    #[test]
    fn an_agent_without_candidates_gets_an_empty_list() {
        for a in AgentAlgorithm::ALL {
            let m = spread(a, &agents(2, &[]), &mut BTreeMap::new(), 1);
            assert!(m.values().all(Vec::is_empty));
        }
    }

    #[test]
    fn algorithms_read_back_what_they_print() {
        for a in AgentAlgorithm::ALL {
            assert_eq!(a.as_str().parse::<AgentAlgorithm>(), Ok(a));
        }
        assert!("round-robin".parse::<AgentAlgorithm>().is_err());
    }
}
