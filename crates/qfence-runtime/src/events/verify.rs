//! Verifying a chain record by record, naming the first broken link.

use super::*;

/// What verification checks beyond the links.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Accept a chain that starts after seq 1 (an exported page): its first `prev` is then
    /// taken on trust.
    pub allow_partial: bool,
    /// The hash the last record must have (kept elsewhere): detects records cut off the end.
    pub expect_head: Option<String>,
}

/// A chain that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// How many records.
    pub count: u64,
    /// The first and last seq (0 when empty).
    pub first_seq: u64,
    pub last_seq: u64,
    /// The last record's hash ([`GENESIS`] when empty).
    pub head: String,
}

/// The first broken link: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}{reason}", self.at())]
pub struct BrokenLink {
    /// The seq of the record where the chain breaks, when that record could be read.
    pub seq: Option<u64>,
    /// Its position in the input (1-based record index, or line for a file).
    pub position: u64,
    pub reason: Break,
}

impl BrokenLink {
    fn at(&self) -> String {
        match self.seq {
            Some(seq) => format!("at seq {seq} (record {}): ", self.position),
            None => format!("at record {}: ", self.position),
        }
    }
}

/// Why a link is broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Break {
    /// The record is not a record (a cut or corrupted line).
    Malformed { error: String },
    /// The record's content does not hash to its `hash`: a field was changed.
    HashMismatch { recorded: String, computed: String },
    /// The record's `prev` is not the previous record's hash: a record before it was changed
    /// (and re-hashed), or replaced.
    PrevMismatch { expected: String, found: String },
    /// Records are missing between the previous record and this one.
    SeqGap { expected: u64, found: u64 },
    /// The record is out of order.
    Reordered { previous: u64, found: u64 },
    /// The first record is not seq 1 with the genesis `prev`.
    BadStart { found: u64 },
    /// The last record's hash is not the expected head: records were cut off the end.
    HeadMismatch { expected: String, found: String },
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Break::Malformed { error } => write!(f, "not a valid record: {error}"),
            Break::HashMismatch { recorded, computed } => write!(
                f,
                "hash mismatch: the record's content hashes to {computed}, but it says {recorded} (a field was changed)"
            ),
            Break::PrevMismatch { expected, found } => write!(
                f,
                "prev mismatch: prev is {found}, but the previous record's hash is {expected} (the previous record was changed or replaced)"
            ),
            Break::SeqGap { expected, found } => write!(
                f,
                "seq gap: expected seq {expected}, found {found} (records were deleted)"
            ),
            Break::Reordered { previous, found } => {
                write!(f, "reordered: seq {found} comes after seq {previous}")
            }
            Break::BadStart { found } => write!(
                f,
                "the log starts at seq {found}, not at seq 1 with the genesis prev (records were deleted from the start)"
            ),
            Break::HeadMismatch { expected, found } => write!(
                f,
                "head mismatch: the last record's hash is {found}, expected {expected} (records were cut off the end)"
            ),
        }
    }
}

/// Checks a chain, record by record, and reports the first broken link.
pub fn verify(records: &[Record], opts: &VerifyOptions) -> Result<Verified, BrokenLink> {
    // Every seq present, to tell records out of order from records deleted.
    let present: std::collections::BTreeSet<u64> = records
        .iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e.seq),
            Record::Malformed { .. } => None,
        })
        .collect();
    let mut prev: Option<&Event> = None;
    let mut first_seq = 0;
    for (i, r) in records.iter().enumerate() {
        let position = i as u64 + 1;
        let e = match r {
            Record::Event(e) => e,
            Record::Malformed { line, error } => {
                return Err(BrokenLink {
                    seq: prev.map(|p| p.seq + 1),
                    position: *line,
                    reason: Break::Malformed {
                        error: error.clone(),
                    },
                });
            }
        };
        let broken = |reason| BrokenLink {
            seq: Some(e.seq),
            position,
            reason,
        };
        let computed = hash_of(e);
        if computed != e.hash {
            return Err(broken(Break::HashMismatch {
                recorded: e.hash.clone(),
                computed,
            }));
        }
        match prev {
            None => {
                first_seq = e.seq;
                let genesis = e.seq == 1 && e.prev == GENESIS;
                if !genesis && !opts.allow_partial {
                    return Err(broken(Break::BadStart { found: e.seq }));
                }
                if e.seq == 1 && e.prev != GENESIS {
                    return Err(broken(Break::PrevMismatch {
                        expected: GENESIS.to_owned(),
                        found: e.prev.clone(),
                    }));
                }
            }
            Some(p) => {
                if e.seq <= p.seq {
                    return Err(broken(Break::Reordered {
                        previous: p.seq,
                        found: e.seq,
                    }));
                }
                if e.seq > p.seq + 1 {
                    // A missing seq that appears later means the order was changed.
                    if present.range(p.seq + 1..e.seq).next().is_some() {
                        return Err(broken(Break::Reordered {
                            previous: p.seq,
                            found: e.seq,
                        }));
                    }
                    return Err(broken(Break::SeqGap {
                        expected: p.seq + 1,
                        found: e.seq,
                    }));
                }
                if e.prev != p.hash {
                    return Err(broken(Break::PrevMismatch {
                        expected: p.hash.clone(),
                        found: e.prev.clone(),
                    }));
                }
            }
        }
        prev = Some(e);
    }
    let head = prev.map_or_else(|| GENESIS.to_owned(), |p| p.hash.clone());
    if let Some(expected) = &opts.expect_head
        && !expected.eq_ignore_ascii_case(&head)
    {
        return Err(BrokenLink {
            seq: prev.map(|p| p.seq),
            position: records.len() as u64,
            reason: Break::HeadMismatch {
                expected: expected.clone(),
                found: head,
            },
        });
    }
    Ok(Verified {
        count: records.len() as u64,
        first_seq,
        last_seq: prev.map_or(0, |p| p.seq),
        head,
    })
}
