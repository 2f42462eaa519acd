//! The crate's error type.

/// Everything that can go wrong in the cluster layer, with the context needed to act on it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("storage at {path}: {source}")]
    Storage {
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("TLS material: {0}")]
    Tls(String),
    #[error("certificate authority: {0}")]
    Ca(String),
    #[error("signing key: {0}")]
    Key(String),
    #[error("Raft: {0}")]
    Raft(String),
    #[error("this orchestrator is not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<String> },
    #[error("peer {peer}: {message}")]
    Peer { peer: String, message: String },
    #[error("I/O at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding: {0}")]
    Encoding(#[from] serde_json::Error),
}
