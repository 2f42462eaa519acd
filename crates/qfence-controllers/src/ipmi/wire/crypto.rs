//! The cipher suites qfence speaks (3 and 17) and the session keys they derive:
//! integrity codes and AES-CBC-128 confidentiality.

use super::*;

/// The RMCP+ cipher suites qfence speaks. Both use AES-CBC-128 for confidentiality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    Three,
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    Seventeen,
}

impl CipherSuite {
    /// The suite with this number, if qfence speaks it.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            3 => Some(Self::Three),
            17 => Some(Self::Seventeen),
            _ => None,
        }
    }

    /// The suite's number.
    pub fn number(self) -> u8 {
        match self {
            Self::Three => 3,
            Self::Seventeen => 17,
        }
    }

    /// The suite's algorithms in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Three => "RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128",
            Self::Seventeen => "RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128",
        }
    }

    pub(super) fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Three => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Self::Seventeen => hmac::HMAC_SHA256,
        }
    }

    /// Authentication, integrity and confidentiality algorithm numbers.
    pub fn algorithms(self) -> [u8; 3] {
        match self {
            Self::Three => [0x01, 0x01, 0x01],
            Self::Seventeen => [0x03, 0x04, 0x01],
        }
    }

    /// Length of the RAKP key-exchange codes (the full HMAC).
    pub fn auth_code_len(self) -> usize {
        match self {
            Self::Three => 20,
            Self::Seventeen => 32,
        }
    }

    /// Length of the integrity check values (packets and RAKP 4).
    pub fn icv_len(self) -> usize {
        match self {
            Self::Three => 12,
            Self::Seventeen => 16,
        }
    }

    pub(super) fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let key = hmac::Key::new(self.hmac(), key);
        let mut ctx = hmac::Context::with_key(&key);
        for p in parts {
            ctx.update(p);
        }
        ctx.sign().as_ref().to_vec()
    }
}

// ---------------------------------------------------------------------------------------------
// Session keys, integrity and confidentiality

/// The keys of one RMCP+ session, derived from the Session Integrity Key: K1 signs packets
/// (HMAC-SHA1-96 or HMAC-SHA256-128), the first 16 bytes of K2 encrypt payloads
/// (AES-CBC-128).
pub struct SessionKeys {
    k1: hmac::Key,
    icv_len: usize,
    aes: Aes128,
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKeys(..)")
    }
}

impl SessionKeys {
    /// Derives K1 and K2 from the SIK (IPMI v2.0 §13.32: K_n = HMAC_SIK(n repeated 20
    /// times); the constants are 20 bytes for SHA-256 too).
    pub fn from_sik(suite: CipherSuite, sik: &[u8]) -> Self {
        let k1 = suite.mac(sik, &[&[0x01; 20]]);
        let k2 = suite.mac(sik, &[&[0x02; 20]]);
        let mut aes_key = [0u8; 16];
        aes_key.copy_from_slice(&k2[..16]);
        Self {
            k1: hmac::Key::new(suite.hmac(), &k1),
            icv_len: suite.icv_len(),
            aes: Aes128::new(&Array::from(aes_key)),
        }
    }

    /// The integrity check value's length.
    pub fn icv_len(&self) -> usize {
        self.icv_len
    }

    pub(super) fn icv(&self, data: &[u8]) -> Vec<u8> {
        hmac::sign(&self.k1, data).as_ref()[..self.icv_len].to_vec()
    }

    /// Encrypts a payload: IV, then AES-CBC of the data followed by the confidentiality pad
    /// (1, 2, 3, … N) and the pad length N.
    pub fn encrypt(&self, plain: &[u8], iv: [u8; 16]) -> Vec<u8> {
        let pad = (BLOCK - (plain.len() + 1) % BLOCK) % BLOCK;
        let mut data = Vec::with_capacity(plain.len() + pad + 1);
        data.extend_from_slice(plain);
        data.extend((1..=pad).map(|i| i as u8));
        data.push(pad as u8);
        let mut out = Vec::with_capacity(BLOCK + data.len());
        out.extend_from_slice(&iv);
        let mut prev = iv;
        for chunk in data.chunks(BLOCK) {
            let mut block = [0u8; BLOCK];
            for (i, b) in block.iter_mut().enumerate() {
                *b = chunk[i] ^ prev[i];
            }
            let mut arr = Array::from(block);
            self.aes.encrypt_block(&mut arr);
            prev = arr.into();
            out.extend_from_slice(&prev);
        }
        out
    }

    /// Decrypts a payload made by [`encrypt`](Self::encrypt) and strips the pad.
    pub fn decrypt(&self, payload: &[u8]) -> Result<Vec<u8>, Malformed> {
        if payload.len() < 2 * BLOCK || !payload.len().is_multiple_of(BLOCK) {
            return Err(malformed(format!(
                "encrypted payload is {} bytes: not an IV plus whole AES blocks",
                payload.len()
            )));
        }
        let mut prev = [0u8; BLOCK];
        prev.copy_from_slice(&payload[..BLOCK]);
        let mut out = Vec::with_capacity(payload.len() - BLOCK);
        for chunk in payload[BLOCK..].chunks(BLOCK) {
            let mut cipher_block = [0u8; BLOCK];
            cipher_block.copy_from_slice(chunk);
            let mut arr = Array::from(cipher_block);
            self.aes.decrypt_block(&mut arr);
            let plain: [u8; BLOCK] = arr.into();
            out.extend(plain.iter().zip(prev.iter()).map(|(a, b)| a ^ b));
            prev = cipher_block;
        }
        let pad = usize::from(*out.last().unwrap_or(&0));
        if pad >= BLOCK || pad + 1 > out.len() {
            return Err(malformed(format!(
                "confidentiality pad length {pad} is impossible"
            )));
        }
        let data_len = out.len() - pad - 1;
        // The pad bytes are 1, 2, 3…; a wrong pad means a wrong key or a corrupt packet.
        if out[data_len..data_len + pad]
            .iter()
            .enumerate()
            .any(|(i, &b)| usize::from(b) != i + 1)
        {
            return Err(malformed("confidentiality pad bytes are not 1, 2, 3…"));
        }
        out.truncate(data_len);
        Ok(out)
    }
}
