//! The orchestrator cluster.
//!
//! qfence runs one orchestrator per site (plus one at a witness site). Together they keep a
//! replicated state — controllers and plans registered at run time, each plan's state, the
//! orchestrators, their public keys and an event log — on Raft (openraft, with redb as the
//! durable store on each node). A single orchestrator is a one-voter cluster; nothing else is
//! needed to run one.
//!
//! The model, in the order a controller call travels:
//!
//! 1. **State** ([`state`]): a closed, versioned command set applied purely, in log order, by
//!    every node. Changes of a plan's state are compare-and-set on its generation.
//! 2. **Leadership** ([`node`]): only the leader, while its lease is valid, issues commands; the
//!    Raft term is the term every command carries. Losing leadership cancels the token handed
//!    out with it, and with it everything started under it.
//! 3. **Routing** ([`routing`]): a controller may only be called from its own site or a site in
//!    its reach. A pure function decides where a call runs: here, forwarded (preferring the
//!    controller's own site), or nowhere — which the caller reports as UNKNOWN.
//! 4. **Forwarding** ([`signing`], [`forward`]): a forwarded call is signed by the leader
//!    (Ed25519) over plan, generation, term, leader, nonce and expiry; the receiver checks all
//!    of them against what it knows before it executes anything.
//! 5. **Transport** ([`tls`], [`network`]): HTTPS with mutual TLS; only certificates from the
//!    cluster's own CA are accepted, in both directions.

pub mod bench;
pub mod error;
pub mod forward;
pub mod network;
pub mod node;
pub mod routing;
pub mod signing;
pub mod state;
pub mod store;
pub mod tls;
pub mod types;

pub use error::ClusterError;
