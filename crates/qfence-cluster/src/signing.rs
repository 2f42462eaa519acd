//! Signed forwarded calls.
//!
//! When the leader is not at a site allowed to call a controller, it asks an orchestrator that
//! is. The request is a [`SignedCall`]: an [`Envelope`] (plan, generation, term, leader, nonce,
//! expiry, controller and the call itself) and the leader's Ed25519 signature over its
//! [canonical bytes](Envelope::signed_bytes). Each orchestrator has its own key pair; the
//! public keys are in the replicated state.
//!
//! [`verify`] is pure: the receiver passes what it knows (time, the newest term, the leader of
//! that term, the signer's key, the plan's generation) and gets either the go-ahead or a typed
//! [`Refusal`] whose message the leader records. Checks run in this order, so the most
//! fundamental reason wins: signature, term, generation, expiry, nonce. A nonce is remembered
//! only for an accepted call and only until its expiry, which is why the expiry is bounded.

use std::collections::HashMap;

use qfence_model::ids::{ControllerId, Generation, OrchestratorId, PlanId, Term};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use crate::error::ClusterError;

/// The longest lifetime a receiver accepts for a forwarded call, in milliseconds. It bounds the
/// nonce cache: a nonce need only be remembered until its call's expiry.
pub const MAX_CALL_LIFETIME_MS: u64 = 60_000;

/// Domain separation for the signed bytes: a signature over anything else never verifies here.
const SIGNING_CONTEXT: &[u8] = b"qfence forwarded call v1\0";

/// An orchestrator's Ed25519 key pair.
pub struct NodeKey {
    pair: Ed25519KeyPair,
    pkcs8: Vec<u8>,
}

impl std::fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeKey")
            .field("public_key", &self.public_key_hex())
            .finish_non_exhaustive()
    }
}

impl NodeKey {
    /// Makes a new key pair.
    pub fn generate() -> Result<Self, ClusterError> {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| ClusterError::Key("generating an Ed25519 key failed".into()))?;
        Self::from_pkcs8(pkcs8.as_ref())
    }

    /// Loads a key pair from its PKCS#8 document.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, ClusterError> {
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8)
            .map_err(|e| ClusterError::Key(format!("not an Ed25519 PKCS#8 key: {e}")))?;
        Ok(Self {
            pair,
            pkcs8: pkcs8.to_vec(),
        })
    }

    /// The PKCS#8 document, to store the key.
    pub fn pkcs8(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The raw 32-byte public key.
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// The public key as lower-case hex, as the replicated state stores it.
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.public_key())
    }

    /// Signs an envelope.
    pub fn sign(&self, envelope: Envelope) -> SignedCall {
        let signature = self.pair.sign(&envelope.signed_bytes());
        SignedCall {
            envelope,
            signature_hex: hex::encode(signature.as_ref()),
        }
    }
}

/// A fresh random nonce (128 bits, hex).
pub fn new_nonce() -> Result<String, ClusterError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ClusterError::Key("the system RNG failed".into()))?;
    Ok(hex::encode(bytes))
}

/// What the leader signs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The plan the call serves; `None` for calls outside any plan (registration, discovery).
    pub plan: Option<PlanId>,
    /// The plan's generation the leader decided at (0 when there is no plan).
    pub generation: Generation,
    /// The leader's term.
    pub term: Term,
    /// The leader, which signed.
    pub leader: OrchestratorId,
    /// Random, never reused.
    pub nonce: String,
    /// Milliseconds since the Unix epoch after which the call must not run.
    pub expires_at_unix_ms: u64,
    /// The controller to call.
    pub controller: ControllerId,
    /// The call itself: a `qfence_call::Call` as JSON, the bytes the leader signed. The
    /// receiver decodes it only once the signature and the checks pass (ADR 0012).
    pub call: serde_json::Value,
}

fn put(out: &mut Vec<u8>, field: &[u8]) {
    out.extend_from_slice(&(field.len() as u64).to_be_bytes());
    out.extend_from_slice(field);
}

impl Envelope {
    /// The canonical bytes the signature covers: a context string, then every field
    /// length-prefixed in a fixed order. The call is serialised as JSON with sorted keys
    /// (serde_json's map is ordered), so equal calls give equal bytes.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(SIGNING_CONTEXT);
        put(
            &mut out,
            self.plan.as_ref().map_or(b"", |p| p.as_str().as_bytes()),
        );
        put(&mut out, &[u8::from(self.plan.is_some())]);
        put(&mut out, &self.generation.0.to_be_bytes());
        put(&mut out, &self.term.0.to_be_bytes());
        put(&mut out, self.leader.as_str().as_bytes());
        put(&mut out, self.nonce.as_bytes());
        put(&mut out, &self.expires_at_unix_ms.to_be_bytes());
        put(&mut out, self.controller.as_str().as_bytes());
        let call = serde_json::to_vec(&self.call).unwrap_or_default();
        put(&mut out, &call);
        out
    }
}

/// An envelope with the leader's signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignedCall {
    pub envelope: Envelope,
    /// The 64-byte Ed25519 signature, hex.
    pub signature_hex: String,
}

/// Why a receiver refused a forwarded call. The display text is what the leader records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Refusal {
    #[error("bad signature: {detail}")]
    BadSignature { detail: String },
    #[error("not the leader of term {term}: signed by {signer}, {known}")]
    NotLeaderOfTerm {
        term: Term,
        signer: OrchestratorId,
        /// What the receiver knows about that term.
        known: String,
    },
    #[error("deposed: term {term} < known term {known}")]
    Deposed { term: Term, known: Term },
    #[error("stale generation: plan {plan} is at generation {current}, the call carries {carried}")]
    StaleGeneration {
        plan: PlanId,
        carried: Generation,
        current: Generation,
    },
    #[error(
        "unknown generation: plan {plan} is at generation {current:?} here, the call carries {carried}"
    )]
    UnknownGeneration {
        plan: PlanId,
        carried: Generation,
        current: Option<Generation>,
    },
    #[error("replayed nonce {nonce}")]
    ReplayedNonce { nonce: String },
    #[error("expired at {expires_at_unix_ms} ms, now {now_unix_ms} ms")]
    Expired {
        expires_at_unix_ms: u64,
        now_unix_ms: u64,
    },
    #[error(
        "expiry {expires_at_unix_ms} ms is more than {MAX_CALL_LIFETIME_MS} ms after now ({now_unix_ms} ms)"
    )]
    ExpiryTooFar {
        expires_at_unix_ms: u64,
        now_unix_ms: u64,
    },
}

/// What the receiver knows when it checks a call.
#[derive(Debug, Clone)]
pub struct VerifyContext<'a> {
    pub now_unix_ms: u64,
    /// The newest term this orchestrator knows.
    pub known_term: Term,
    /// The leader of `known_term`, if this orchestrator knows it.
    pub leader_of_known_term: Option<&'a OrchestratorId>,
    /// The signer's public key from the replicated state, raw 32 bytes.
    pub signer_key: Option<&'a [u8]>,
    /// The current generation of the envelope's plan, if the plan is registered.
    pub plan_generation: Option<Generation>,
}

/// Forwarded-call nonces seen, each kept until its call's expiry.
#[derive(Debug, Default)]
pub struct NonceCache {
    seen: HashMap<String, u64>,
    purged_at_ms: u64,
}

impl NonceCache {
    /// How many nonces are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    fn purge(&mut self, now_ms: u64) {
        // At most once a second: the cache stays bounded by (call rate × MAX_CALL_LIFETIME_MS).
        if now_ms.saturating_sub(self.purged_at_ms) >= 1_000 {
            self.seen.retain(|_, expiry| *expiry >= now_ms);
            self.purged_at_ms = now_ms;
        }
    }
}

/// Checks a forwarded call. On success its nonce is recorded, so the same call is refused next
/// time.
pub fn verify(
    call: &SignedCall,
    ctx: &VerifyContext<'_>,
    nonces: &mut NonceCache,
) -> Result<(), Refusal> {
    let e = &call.envelope;
    // 1. Signature: nothing else in the envelope is trusted before it checks out.
    let Some(key) = ctx.signer_key else {
        return Err(Refusal::BadSignature {
            detail: format!("no public key is known for {}", e.leader),
        });
    };
    let signature = hex::decode(&call.signature_hex).map_err(|_| Refusal::BadSignature {
        detail: "the signature is not hex".into(),
    })?;
    UnparsedPublicKey::new(&ED25519, key)
        .verify(&e.signed_bytes(), &signature)
        .map_err(|_| Refusal::BadSignature {
            detail: format!("it does not verify with the key of {}", e.leader),
        })?;

    // 2. Term: a newer term means the signer was deposed; the same term must be its own.
    if e.term < ctx.known_term {
        return Err(Refusal::Deposed {
            term: e.term,
            known: ctx.known_term,
        });
    }
    if e.term > ctx.known_term {
        return Err(Refusal::NotLeaderOfTerm {
            term: e.term,
            signer: e.leader.clone(),
            known: format!("this orchestrator only knows term {}", ctx.known_term),
        });
    }
    match ctx.leader_of_known_term {
        Some(leader) if *leader == e.leader => {}
        Some(leader) => {
            return Err(Refusal::NotLeaderOfTerm {
                term: e.term,
                signer: e.leader.clone(),
                known: format!("the leader of that term is {leader}"),
            });
        }
        None => {
            return Err(Refusal::NotLeaderOfTerm {
                term: e.term,
                signer: e.leader.clone(),
                known: "no leader of that term is known here".into(),
            });
        }
    }

    // 3. Generation.
    if let Some(plan) = &e.plan {
        match ctx.plan_generation {
            Some(current) if current == e.generation => {}
            Some(current) if e.generation < current => {
                return Err(Refusal::StaleGeneration {
                    plan: plan.clone(),
                    carried: e.generation,
                    current,
                });
            }
            current => {
                return Err(Refusal::UnknownGeneration {
                    plan: plan.clone(),
                    carried: e.generation,
                    current,
                });
            }
        }
    }

    // 4. Expiry, bounded so the nonce cache is.
    if e.expires_at_unix_ms < ctx.now_unix_ms {
        return Err(Refusal::Expired {
            expires_at_unix_ms: e.expires_at_unix_ms,
            now_unix_ms: ctx.now_unix_ms,
        });
    }
    if e.expires_at_unix_ms > ctx.now_unix_ms + MAX_CALL_LIFETIME_MS {
        return Err(Refusal::ExpiryTooFar {
            expires_at_unix_ms: e.expires_at_unix_ms,
            now_unix_ms: ctx.now_unix_ms,
        });
    }

    // 5. Nonce.
    nonces.purge(ctx.now_unix_ms);
    if nonces.seen.contains_key(&e.nonce) {
        return Err(Refusal::ReplayedNonce {
            nonce: e.nonce.clone(),
        });
    }
    nonces.seen.insert(e.nonce.clone(), e.expires_at_unix_ms);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000_000;

    fn leader() -> OrchestratorId {
        OrchestratorId::new("orch-dc2").unwrap()
    }

    fn envelope() -> Envelope {
        Envelope {
            plan: Some(PlanId::new("erp-db").unwrap()),
            generation: Generation(7),
            term: Term(5),
            leader: leader(),
            nonce: new_nonce().unwrap(),
            expires_at_unix_ms: NOW + 5_000,
            controller: ControllerId::new("bmc-dc1").unwrap(),
            call: json!({"op": "power.status", "target": "db1"}),
        }
    }

    fn ctx<'a>(key: &'a [u8], leader: &'a OrchestratorId) -> VerifyContext<'a> {
        VerifyContext {
            now_unix_ms: NOW,
            known_term: Term(5),
            leader_of_known_term: Some(leader),
            signer_key: Some(key),
            plan_generation: Some(Generation(7)),
        }
    }

    #[test]
    fn a_good_call_passes_once_then_is_a_replay() {
        let key = NodeKey::generate().unwrap();
        let l = leader();
        let call = key.sign(envelope());
        let mut nonces = NonceCache::default();
        assert_eq!(
            verify(&call, &ctx(key.public_key(), &l), &mut nonces),
            Ok(())
        );
        let again = verify(&call, &ctx(key.public_key(), &l), &mut nonces).unwrap_err();
        assert!(matches!(again, Refusal::ReplayedNonce { .. }));
        assert!(again.to_string().starts_with("replayed nonce"));
    }

    #[test]
    fn a_tampered_call_or_a_forged_signature_is_refused() {
        let key = NodeKey::generate().unwrap();
        let forger = NodeKey::generate().unwrap();
        let l = leader();
        let mut nonces = NonceCache::default();

        let mut tampered = key.sign(envelope());
        tampered.envelope.call = json!({"op": "power.off", "target": "db1"});
        let r = verify(&tampered, &ctx(key.public_key(), &l), &mut nonces).unwrap_err();
        assert!(r.to_string().starts_with("bad signature"), "{r}");

        let forged = forger.sign(envelope());
        let r = verify(&forged, &ctx(key.public_key(), &l), &mut nonces).unwrap_err();
        assert!(matches!(r, Refusal::BadSignature { .. }));

        let unknown = key.sign(envelope());
        let mut c = ctx(key.public_key(), &l);
        c.signer_key = None;
        assert!(matches!(
            verify(&unknown, &c, &mut nonces),
            Err(Refusal::BadSignature { .. })
        ));
        assert!(nonces.is_empty(), "refused calls leave no nonce behind");
    }

    #[test]
    fn a_call_from_an_older_term_is_deposed() {
        let key = NodeKey::generate().unwrap();
        let l = leader();
        let call = key.sign(envelope());
        let mut c = ctx(key.public_key(), &l);
        c.known_term = Term(6);
        let r = verify(&call, &c, &mut NonceCache::default()).unwrap_err();
        assert_eq!(
            r,
            Refusal::Deposed {
                term: Term(5),
                known: Term(6)
            }
        );
        assert_eq!(r.to_string(), "deposed: term 5 < known term 6");
    }

    #[test]
    fn a_signer_that_is_not_the_leader_of_the_term_is_refused() {
        let key = NodeKey::generate().unwrap();
        let other = OrchestratorId::new("orch-dc1").unwrap();
        let l = leader();
        let call = key.sign(envelope());
        let mut nonces = NonceCache::default();

        let r = verify(&call, &ctx(key.public_key(), &other), &mut nonces).unwrap_err();
        assert!(r.to_string().starts_with("not the leader of term 5"), "{r}");

        let mut c = ctx(key.public_key(), &l);
        c.known_term = Term(4);
        c.leader_of_known_term = None;
        assert!(matches!(
            verify(&call, &c, &mut nonces),
            Err(Refusal::NotLeaderOfTerm { .. })
        ));
    }

    #[test]
    fn a_stale_generation_is_refused() {
        let key = NodeKey::generate().unwrap();
        let l = leader();
        let call = key.sign(envelope());
        let mut c = ctx(key.public_key(), &l);
        c.plan_generation = Some(Generation(8));
        let r = verify(&call, &c, &mut NonceCache::default()).unwrap_err();
        assert!(r.to_string().starts_with("stale generation"), "{r}");

        c.plan_generation = None;
        assert!(matches!(
            verify(&call, &c, &mut NonceCache::default()),
            Err(Refusal::UnknownGeneration { .. })
        ));
    }

    #[test]
    fn an_expired_call_or_one_living_too_long_is_refused() {
        let key = NodeKey::generate().unwrap();
        let l = leader();
        let mut e = envelope();
        e.expires_at_unix_ms = NOW - 1;
        let r = verify(
            &key.sign(e),
            &ctx(key.public_key(), &l),
            &mut NonceCache::default(),
        )
        .unwrap_err();
        assert!(r.to_string().starts_with("expired"), "{r}");

        let mut e = envelope();
        e.expires_at_unix_ms = NOW + MAX_CALL_LIFETIME_MS + 1;
        assert!(matches!(
            verify(
                &key.sign(e),
                &ctx(key.public_key(), &l),
                &mut NonceCache::default()
            ),
            Err(Refusal::ExpiryTooFar { .. })
        ));
    }

    #[test]
    fn nonces_are_forgotten_after_their_expiry() {
        let key = NodeKey::generate().unwrap();
        let l = leader();
        let mut nonces = NonceCache::default();
        verify(
            &key.sign(envelope()),
            &ctx(key.public_key(), &l),
            &mut nonces,
        )
        .unwrap();
        assert_eq!(nonces.len(), 1);
        let mut later = ctx(key.public_key(), &l);
        later.now_unix_ms = NOW + 10_000;
        let mut e = envelope();
        e.expires_at_unix_ms = later.now_unix_ms + 1_000;
        verify(&key.sign(e), &later, &mut nonces).unwrap();
        assert_eq!(nonces.len(), 1, "the first nonce expired and was purged");
    }

    #[test]
    fn every_field_is_covered_by_the_signature() {
        let base = envelope();
        let variants: Vec<Envelope> = vec![
            Envelope {
                plan: None,
                ..base.clone()
            },
            Envelope {
                generation: Generation(8),
                ..base.clone()
            },
            Envelope {
                term: Term(6),
                ..base.clone()
            },
            Envelope {
                leader: OrchestratorId::new("x").unwrap(),
                ..base.clone()
            },
            Envelope {
                nonce: "00".into(),
                ..base.clone()
            },
            Envelope {
                expires_at_unix_ms: base.expires_at_unix_ms + 1,
                ..base.clone()
            },
            Envelope {
                controller: ControllerId::new("y").unwrap(),
                ..base.clone()
            },
            Envelope {
                call: json!({}),
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.signed_bytes(), base.signed_bytes(), "{v:?}");
        }
    }

    #[test]
    fn keys_round_trip_through_pkcs8() {
        let key = NodeKey::generate().unwrap();
        let again = NodeKey::from_pkcs8(key.pkcs8()).unwrap();
        assert_eq!(key.public_key_hex(), again.public_key_hex());
        assert_eq!(key.public_key().len(), 32);
    }
}
