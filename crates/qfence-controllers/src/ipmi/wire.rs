//! RMCP+ on the wire, without I/O: packet framing, the RAKP handshake's messages and keys,
//! integrity (HMAC-SHA1-96) and confidentiality (AES-CBC-128), IPMI request/response messages,
//! and the decoders of the few command answers the driver reads.
//!
//! Every decoder takes untrusted bytes and returns [`Malformed`] rather than panicking; the
//! property tests below feed them arbitrary input.

use std::fmt;

use aes::Aes128;
use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use ring::hmac;

/// RMCP header: version 1.0 (0x06), reserved, sequence 0xFF (no RMCP ACK), class IPMI.
pub const RMCP_HEADER: [u8; 4] = [0x06, 0x00, 0xFF, 0x07];
/// Authentication type field of an IPMI v2.0 (RMCP+) session header.
const AUTH_TYPE_RMCP_PLUS: u8 = 0x06;
/// The "next header" byte after the integrity pad: always 0x07 (RMCP class IPMI).
const NEXT_HEADER: u8 = 0x07;
/// Our software ID as requester (remote console, SWID 0x40 → address 0x81).
const RQ_ADDR: u8 = 0x81;
/// The BMC's responder address.
const RS_ADDR: u8 = 0x20;
/// Bytes of a session header: auth type, payload type, session id, sequence, length.
const SESSION_HEADER_LEN: usize = 12;
/// The longest integrity code of any suite (HMAC-SHA256-128).
const MAX_ICV_LEN: usize = 16;
/// AES block size.
const BLOCK: usize = 16;

/// RMCP+ payload types.
pub mod payload {
    pub const IPMI: u8 = 0x00;
    pub const OPEN_SESSION_REQUEST: u8 = 0x10;
    pub const OPEN_SESSION_RESPONSE: u8 = 0x11;
    pub const RAKP1: u8 = 0x12;
    pub const RAKP2: u8 = 0x13;
    pub const RAKP3: u8 = 0x14;
    pub const RAKP4: u8 = 0x15;
}

/// Network functions (requests; a response is the request's value + 1).
pub mod netfn {
    pub const CHASSIS: u8 = 0x00;
    pub const APP: u8 = 0x06;
}

/// Command numbers, by network function.
pub mod cmd {
    /// Chassis: Get Chassis Status.
    pub const GET_CHASSIS_STATUS: u8 = 0x01;
    /// Chassis: Chassis Control.
    pub const CHASSIS_CONTROL: u8 = 0x02;
    /// App: Get Device ID.
    pub const GET_DEVICE_ID: u8 = 0x01;
    /// App: Get Device GUID.
    pub const GET_DEVICE_GUID: u8 = 0x08;
    /// App: Get Channel Authentication Capabilities (session-less, IPMI v1.5 framing).
    pub const GET_CHANNEL_AUTH_CAPS: u8 = 0x38;
    /// App: Get NetFn Support (IPMI 2.0 firmware firewall).
    pub const GET_NETFN_SUPPORT: u8 = 0x09;
    /// App: Reset Watchdog Timer.
    pub const RESET_WATCHDOG: u8 = 0x22;
    /// App: Set Watchdog Timer.
    pub const SET_WATCHDOG: u8 = 0x24;
    /// App: Get Watchdog Timer.
    pub const GET_WATCHDOG: u8 = 0x25;
    /// App: Get System GUID.
    pub const GET_SYSTEM_GUID: u8 = 0x37;
    /// App: Set Session Privilege Level.
    pub const SET_SESSION_PRIVILEGE: u8 = 0x3B;
    /// App: Close Session.
    pub const CLOSE_SESSION: u8 = 0x3C;
    /// App: Get Session Info.
    pub const GET_SESSION_INFO: u8 = 0x3D;
}

/// Bytes that do not follow the protocol, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn malformed(what: impl Into<String>) -> Malformed {
    Malformed(what.into())
}

/// A bounds-checked cursor over untrusted bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, pos: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(malformed(format!(
                "{} is {} bytes, too short (needed {} at offset {})",
                self.what,
                self.buf.len(),
                n,
                self.pos
            ))),
        }
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn array16(&mut self) -> Result<[u8; 16], Malformed> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(a)
    }

    fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Privilege levels

/// An IPMI privilege level (the low nibble of the role byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Privilege {
    Callback = 1,
    User = 2,
    Operator = 3,
    Administrator = 4,
    Oem = 5,
}

impl Privilege {
    /// The level from its number, if it is one.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Callback),
            2 => Some(Self::User),
            3 => Some(Self::Operator),
            4 => Some(Self::Administrator),
            5 => Some(Self::Oem),
            _ => None,
        }
    }

    /// The level's name as the IPMI spec and ipmitool write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Callback => "CALLBACK",
            Self::User => "USER",
            Self::Operator => "OPERATOR",
            Self::Administrator => "ADMINISTRATOR",
            Self::Oem => "OEM",
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// Cipher suites

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

    fn hmac(self) -> hmac::Algorithm {
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

    fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
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

    fn icv(&self, data: &[u8]) -> Vec<u8> {
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

// ---------------------------------------------------------------------------------------------
// Packets

/// A decoded RMCP+ packet. `payload` is still encrypted when `encrypted` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<'a> {
    pub payload_type: u8,
    pub encrypted: bool,
    pub authenticated: bool,
    /// The session id the sender addresses (ours in answers from the BMC).
    pub session_id: u32,
    pub sequence: u32,
    pub payload: &'a [u8],
    /// What the integrity code covers: session header through the next-header byte.
    pub signed: &'a [u8],
    /// The integrity code (empty if not authenticated).
    pub auth_code: &'a [u8],
}

/// Frames one RMCP+ packet. With `keys`, the packet is signed; `payload` must already be
/// encrypted if `encrypted` is set.
pub fn build_packet(
    payload_type: u8,
    encrypted: bool,
    session_id: u32,
    sequence: u32,
    payload: &[u8],
    keys: Option<&SessionKeys>,
) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + SESSION_HEADER_LEN + payload.len() + 20);
    p.extend_from_slice(&RMCP_HEADER);
    p.push(AUTH_TYPE_RMCP_PLUS);
    let mut pt = payload_type & 0x3F;
    if encrypted {
        pt |= 0x80;
    }
    if keys.is_some() {
        pt |= 0x40;
    }
    p.push(pt);
    p.extend_from_slice(&session_id.to_le_bytes());
    p.extend_from_slice(&sequence.to_le_bytes());
    p.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    p.extend_from_slice(payload);
    if let Some(keys) = keys {
        // Pad so that session header + payload + pad + pad length + next header is a multiple
        // of 4 bytes.
        let pad = (4 - (SESSION_HEADER_LEN + payload.len() + 2) % 4) % 4;
        p.extend(std::iter::repeat_n(0xFF, pad));
        p.push(pad as u8);
        p.push(NEXT_HEADER);
        let icv = keys.icv(&p[4..]);
        p.extend_from_slice(&icv);
    }
    p
}

/// Decodes an RMCP+ packet's framing; `icv_len` is the session's integrity code length (any
/// value for handshake packets, which carry none). Integrity is checked with [`verify`].
pub fn parse_packet(buf: &[u8], icv_len: usize) -> Result<Packet<'_>, Malformed> {
    if icv_len > MAX_ICV_LEN {
        return Err(malformed(format!(
            "integrity code length {icv_len} is unknown"
        )));
    }
    let mut r = Reader::new(buf, "RMCP+ packet");
    let rmcp = r.take(4)?;
    if rmcp[0] != 0x06 || rmcp[3] & 0x1F != 0x07 {
        return Err(malformed(format!(
            "not an RMCP IPMI message (header {:02x?})",
            rmcp
        )));
    }
    let auth_type = r.u8()?;
    if auth_type != AUTH_TYPE_RMCP_PLUS {
        return Err(malformed(format!(
            "authentication type 0x{auth_type:02x} is not RMCP+ (0x06)"
        )));
    }
    let pt = r.u8()?;
    let session_id = r.u32()?;
    let sequence = r.u32()?;
    let len = usize::from(r.u16()?);
    let payload = r.take(len)?;
    let authenticated = pt & 0x40 != 0;
    let (signed, auth_code) = if authenticated {
        let trailer = r.rest();
        if trailer.len() < 2 + icv_len {
            return Err(malformed(format!(
                "integrity trailer is {} bytes, too short",
                trailer.len()
            )));
        }
        let code_at = buf.len() - icv_len;
        let pad_len = usize::from(buf[code_at - 2]);
        let next = buf[code_at - 1];
        // pad bytes + pad length + next header must be exactly what lies between payload and
        // code
        if next != NEXT_HEADER || pad_len + 2 != trailer.len() - icv_len {
            return Err(malformed(format!(
                "integrity trailer is inconsistent (pad length {pad_len}, next header 0x{next:02x}, {} trailer bytes)",
                trailer.len()
            )));
        }
        (&buf[4..code_at], &buf[code_at..])
    } else {
        (&buf[4..4 + SESSION_HEADER_LEN + len], &buf[..0])
    };
    Ok(Packet {
        payload_type: pt & 0x3F,
        encrypted: pt & 0x80 != 0,
        authenticated,
        session_id,
        sequence,
        payload,
        signed,
        auth_code,
    })
}

/// Checks a packet's integrity code with the session's K1.
pub fn verify(packet: &Packet<'_>, keys: &SessionKeys) -> Result<(), Malformed> {
    if !packet.authenticated {
        return Err(malformed("packet in an open session is not authenticated"));
    }
    if keys.icv(packet.signed)[..] != *packet.auth_code {
        return Err(malformed("integrity check value does not match"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Session setup: Open Session and RAKP 1-4

/// Builds an RMCP+ Open Session Request proposing exactly `suite`'s algorithms.
pub fn open_session_request(tag: u8, console_sid: u32, suite: CipherSuite) -> Vec<u8> {
    let mut m = vec![tag, 0x00, 0x00, 0x00];
    m.extend_from_slice(&console_sid.to_le_bytes());
    for (kind, alg) in suite.algorithms().into_iter().enumerate() {
        m.extend_from_slice(&[kind as u8, 0, 0, 0x08, alg, 0, 0, 0]);
    }
    m
}

/// The BMC's answer to Open Session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSessionResponse {
    pub tag: u8,
    pub status: u8,
    pub console_sid: u32,
    pub bmc_sid: u32,
    /// Authentication, integrity and confidentiality algorithms the BMC chose.
    pub algorithms: [u8; 3],
}

/// Decodes an Open Session Response. An error status may come with no further fields.
pub fn parse_open_session_response(m: &[u8]) -> Result<OpenSessionResponse, Malformed> {
    let mut r = Reader::new(m, "Open Session Response");
    let tag = r.u8()?;
    let status = r.u8()?;
    if status != 0 {
        return Ok(OpenSessionResponse {
            tag,
            status,
            console_sid: 0,
            bmc_sid: 0,
            algorithms: [0; 3],
        });
    }
    let _max_privilege = r.u8()?;
    let _reserved = r.u8()?;
    let console_sid = r.u32()?;
    let bmc_sid = r.u32()?;
    let mut algorithms = [0u8; 3];
    for (i, alg) in algorithms.iter_mut().enumerate() {
        let rec = r.take(8)?;
        if usize::from(rec[0]) != i {
            return Err(malformed(format!(
                "Open Session Response algorithm record {i} has type {}",
                rec[0]
            )));
        }
        *alg = rec[4] & 0x3F;
    }
    Ok(OpenSessionResponse {
        tag,
        status,
        console_sid,
        bmc_sid,
        algorithms,
    })
}

/// What the console holds during the RAKP exchange.
#[derive(Clone)]
pub struct Rakp {
    pub console_sid: u32,
    pub bmc_sid: u32,
    /// Our random number Rm.
    pub rm: [u8; 16],
    /// The role byte sent in RAKP 1: requested privilege, with bit 4 = name-only lookup.
    pub role: u8,
    pub username: Vec<u8>,
    pub suite: CipherSuite,
}

impl fmt::Debug for Rakp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rakp")
            .field("console_sid", &self.console_sid)
            .field("bmc_sid", &self.bmc_sid)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Longest user name RAKP can carry.
pub const MAX_USERNAME: usize = 16;

impl Rakp {
    /// RAKP Message 1.
    pub fn message1(&self, tag: u8) -> Vec<u8> {
        let mut m = vec![tag, 0, 0, 0];
        m.extend_from_slice(&self.bmc_sid.to_le_bytes());
        m.extend_from_slice(&self.rm);
        m.push(self.role);
        m.extend_from_slice(&[0, 0]);
        m.push(self.username.len() as u8);
        m.extend_from_slice(&self.username);
        m
    }

    /// The key-exchange code the BMC must send in RAKP 2, keyed with the user's password.
    pub fn expected_rakp2_code(&self, kuid: &[u8], rc: &[u8; 16], guid: &[u8; 16]) -> Vec<u8> {
        self.suite.mac(
            kuid,
            &[
                &self.console_sid.to_le_bytes(),
                &self.bmc_sid.to_le_bytes(),
                &self.rm,
                rc,
                guid,
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        )
    }

    /// RAKP Message 3, proving we know the password.
    pub fn message3(&self, tag: u8, kuid: &[u8], rc: &[u8; 16]) -> Vec<u8> {
        let code = self.suite.mac(
            kuid,
            &[
                rc,
                &self.console_sid.to_le_bytes(),
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        );
        let mut m = vec![tag, 0, 0, 0];
        m.extend_from_slice(&self.bmc_sid.to_le_bytes());
        m.extend_from_slice(&code);
        m
    }

    /// The Session Integrity Key, keyed with the BMC key Kg (the password when there is none).
    pub fn sik(&self, kg: &[u8], rc: &[u8; 16]) -> Vec<u8> {
        self.suite.mac(
            kg,
            &[
                &self.rm,
                rc,
                &[self.role, self.username.len() as u8],
                &self.username,
            ],
        )
    }

    /// The integrity check value the BMC must send in RAKP 4 (truncated to the suite's
    /// integrity length).
    pub fn expected_rakp4_icv(&self, sik: &[u8], guid: &[u8; 16]) -> Vec<u8> {
        let mut full = self
            .suite
            .mac(sik, &[&self.rm, &self.bmc_sid.to_le_bytes(), guid]);
        full.truncate(self.suite.icv_len());
        full
    }
}

/// RAKP Message 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp2 {
    pub tag: u8,
    pub status: u8,
    pub console_sid: u32,
    /// The BMC's random number Rc.
    pub rc: [u8; 16],
    /// The BMC's GUID.
    pub guid: [u8; 16],
    pub code: Vec<u8>,
}

/// Decodes RAKP Message 2 with a `code_len`-byte code. An error status may come with no
/// further fields.
pub fn parse_rakp2(m: &[u8], code_len: usize) -> Result<Rakp2, Malformed> {
    let mut r = Reader::new(m, "RAKP Message 2");
    let tag = r.u8()?;
    let status = r.u8()?;
    if status != 0 {
        return Ok(Rakp2 {
            tag,
            status,
            console_sid: 0,
            rc: [0; 16],
            guid: [0; 16],
            code: Vec::new(),
        });
    }
    r.take(2)?;
    let console_sid = r.u32()?;
    let rc = r.array16()?;
    let guid = r.array16()?;
    let code = r.take(code_len)?.to_vec();
    Ok(Rakp2 {
        tag,
        status,
        console_sid,
        rc,
        guid,
        code,
    })
}

/// RAKP Message 4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rakp4 {
    pub tag: u8,
    pub status: u8,
    pub console_sid: u32,
    pub icv: Vec<u8>,
}

/// Decodes RAKP Message 4 with an `icv_len`-byte check value. An error status may come with no
/// further fields.
pub fn parse_rakp4(m: &[u8], icv_len: usize) -> Result<Rakp4, Malformed> {
    let mut r = Reader::new(m, "RAKP Message 4");
    let tag = r.u8()?;
    let status = r.u8()?;
    if status != 0 {
        return Ok(Rakp4 {
            tag,
            status,
            console_sid: 0,
            icv: Vec::new(),
        });
    }
    r.take(2)?;
    let console_sid = r.u32()?;
    // Some BMCs send the full HMAC; the first `icv_len` bytes are the check value.
    let icv = r.take(icv_len)?.to_vec();
    Ok(Rakp4 {
        tag,
        status,
        console_sid,
        icv,
    })
}

/// What an RMCP+ status code (Open Session, RAKP 2 and 4) means.
pub fn rmcp_status_text(status: u8) -> &'static str {
    match status {
        0x01 => "insufficient resources to create a session",
        0x02 => "invalid session ID",
        0x03 => "invalid payload type",
        0x04 => "invalid authentication algorithm",
        0x05 => "invalid integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        0x08 => "inactive session ID",
        0x09 => "invalid role",
        0x0A => "unauthorized role or privilege level requested",
        0x0B => "insufficient resources to create a session at the requested role",
        0x0C => "invalid name length",
        0x0D => "unauthorized name",
        0x0E => "unauthorized GUID",
        0x0F => "invalid integrity check value",
        0x10 => "invalid confidentiality algorithm",
        0x11 => "no cipher suite match with proposed security algorithms",
        0x12 => "illegal or unrecognized parameter",
        _ => "unknown status",
    }
}

// ---------------------------------------------------------------------------------------------
// IPMI messages

fn checksum(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0u8, |acc, &b| acc.wrapping_add(b))
        .wrapping_neg()
}

/// An IPMI request message from the remote console to the BMC (LUN 0).
pub fn ipmi_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut m = vec![RS_ADDR, netfn << 2];
    m.push(checksum(&m));
    let body_start = m.len();
    m.extend_from_slice(&[RQ_ADDR, (rq_seq & 0x3F) << 2, cmd]);
    m.extend_from_slice(data);
    let c = checksum(&m[body_start..]);
    m.push(c);
    m
}

/// An IPMI response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpmiResponse {
    /// The response's network function (request netfn + 1).
    pub netfn: u8,
    pub rq_seq: u8,
    pub cmd: u8,
    /// Completion code.
    pub cc: u8,
    pub data: Vec<u8>,
}

/// Decodes an IPMI response message and checks both checksums.
pub fn parse_ipmi_response(m: &[u8]) -> Result<IpmiResponse, Malformed> {
    if m.len() < 8 {
        return Err(malformed(format!(
            "IPMI response is {} bytes, too short (at least 8)",
            m.len()
        )));
    }
    if checksum(&m[..2]) != m[2] {
        return Err(malformed("IPMI response header checksum is wrong"));
    }
    let last = m.len() - 1;
    if checksum(&m[3..last]) != m[last] {
        return Err(malformed("IPMI response data checksum is wrong"));
    }
    Ok(IpmiResponse {
        netfn: m[1] >> 2,
        rq_seq: m[4] >> 2,
        cmd: m[5],
        cc: m[6],
        data: m[7..last].to_vec(),
    })
}

/// What an IPMI completion code means.
pub fn completion_code_text(cc: u8) -> &'static str {
    match cc {
        0x00 => "command completed normally",
        0x80 => "command-specific error 0x80",
        0x81 => "command-specific error 0x81",
        0x82 => "command-specific error 0x82",
        0xC0 => "node busy",
        0xC1 => "invalid command",
        0xC2 => "command invalid for given LUN",
        0xC3 => "timeout while processing command",
        0xC4 => "out of space",
        0xC5 => "reservation canceled or invalid",
        0xC6 => "request data truncated",
        0xC7 => "request data length invalid",
        0xC8 => "request data field length limit exceeded",
        0xC9 => "parameter out of range",
        0xCA => "cannot return number of requested data bytes",
        0xCB => "requested sensor, data, or record not present",
        0xCC => "invalid data field in request",
        0xCD => "command illegal for specified sensor or record type",
        0xCE => "command response could not be provided",
        0xCF => "cannot execute duplicated request",
        0xD0 => "SDR repository in update mode",
        0xD1 => "device in firmware update mode",
        0xD2 => "BMC initialization in progress",
        0xD3 => "destination unavailable",
        0xD4 => "insufficient privilege level",
        0xD5 => "command not supported in present state",
        0xD6 => "command sub-function disabled or unavailable",
        0xFF => "unspecified error",
        _ => "unknown completion code",
    }
}

/// Frames an IPMI v1.5 session-less message (authentication type none, session 0), the
/// form Get Channel Authentication Capabilities takes before any session exists.
pub fn build_sessionless(message: &[u8]) -> Vec<u8> {
    let mut p = RMCP_HEADER.to_vec();
    p.push(0x00);
    p.extend_from_slice(&[0; 8]);
    p.push(message.len() as u8);
    p.extend_from_slice(message);
    p
}

/// Decodes an IPMI v1.5 session-less packet and returns its IPMI message.
pub fn parse_sessionless(buf: &[u8]) -> Result<&[u8], Malformed> {
    let mut r = Reader::new(buf, "IPMI v1.5 packet");
    let rmcp = r.take(4)?;
    if rmcp[0] != 0x06 || rmcp[3] & 0x1F != 0x07 {
        return Err(malformed(format!(
            "not an RMCP IPMI message (header {rmcp:02x?})"
        )));
    }
    let auth_type = r.u8()?;
    if auth_type != 0x00 {
        return Err(malformed(format!(
            "authentication type 0x{auth_type:02x} in a session-less answer"
        )));
    }
    let _seq = r.u32()?;
    let session = r.u32()?;
    if session != 0 {
        return Err(malformed("session-less answer names a session"));
    }
    let len = usize::from(r.u8()?);
    r.take(len)
}

// ---------------------------------------------------------------------------------------------
// Command answers

/// Get Channel Authentication Capabilities, the parts that matter for security.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAuth {
    pub channel: u8,
    /// The BMC speaks IPMI 2.0 (RMCP+).
    pub ipmi20: bool,
    /// A BMC key (Kg) other than the default is set.
    pub kg_set: bool,
    /// Users with a null name are enabled.
    pub null_usernames: bool,
    /// Anonymous login (null name and null password) is enabled.
    pub anonymous_login: bool,
}

/// Decodes Get Channel Authentication Capabilities data.
pub fn parse_channel_auth(data: &[u8]) -> Result<ChannelAuth, Malformed> {
    let mut r = Reader::new(data, "Get Channel Authentication Capabilities answer");
    let channel = r.u8()? & 0x0F;
    let _auth_types = r.u8()?;
    let flags = r.u8()?;
    let ext = r.u8()?;
    Ok(ChannelAuth {
        channel,
        ipmi20: ext & 0x02 != 0,
        kg_set: flags & 0x20 != 0,
        null_usernames: flags & 0x02 != 0,
        anonymous_login: flags & 0x01 != 0,
    })
}

/// Get Chassis Status, first byte (current power state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChassisStatus {
    pub power_on: bool,
    /// The whole current-power-state byte, for evidence.
    pub power_state: u8,
}

/// Decodes Get Chassis Status data (after the completion code).
pub fn parse_chassis_status(data: &[u8]) -> Result<ChassisStatus, Malformed> {
    let mut r = Reader::new(data, "Get Chassis Status answer");
    let b = r.u8()?;
    Ok(ChassisStatus {
        power_on: b & 0x01 != 0,
        power_state: b,
    })
}

/// Watchdog timeout actions (Timer Actions bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogAction {
    None,
    HardReset,
    PowerDown,
    PowerCycle,
    Other(u8),
}

impl WatchdogAction {
    fn from_bits(b: u8) -> Self {
        match b & 0x07 {
            0 => Self::None,
            1 => Self::HardReset,
            2 => Self::PowerDown,
            3 => Self::PowerCycle,
            o => Self::Other(o),
        }
    }

    /// The action's name, for evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::HardReset => "hard-reset",
            Self::PowerDown => "power-down",
            Self::PowerCycle => "power-cycle",
            Self::Other(_) => "reserved",
        }
    }
}

/// Get Watchdog Timer, decoded as far as the BMC sent it.
///
/// The spec's answer is 8 data bytes. OpenIPMI's `ipmi_sim` 2.0.33 sends 6 (no present
/// countdown) and echoes the Set request's "don't stop" bit where the running bit belongs, so
/// the running state is only trusted from a complete answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogTimer {
    pub timer_use: u8,
    pub action: WatchdogAction,
    pub pretimeout_seconds: u8,
    pub expiration_flags: u8,
    /// In 100 ms units; absent when the answer stops before it.
    pub initial_countdown: Option<u16>,
    /// In 100 ms units; absent when the answer stops before it.
    pub present_countdown: Option<u16>,
    /// How many data bytes the BMC sent.
    pub len: usize,
}

/// The length of a complete Get Watchdog Timer answer.
pub const WATCHDOG_ANSWER_LEN: usize = 8;

impl WatchdogTimer {
    /// Whether the timer runs, when the answer is complete enough to say.
    pub fn running(&self) -> Option<bool> {
        (self.len >= WATCHDOG_ANSWER_LEN).then_some(self.timer_use & 0x40 != 0)
    }
}

/// Decodes Get Watchdog Timer data; needs at least the first four bytes.
pub fn parse_watchdog(data: &[u8]) -> Result<WatchdogTimer, Malformed> {
    let mut r = Reader::new(data, "Get Watchdog Timer answer");
    let timer_use = r.u8()?;
    let action = WatchdogAction::from_bits(r.u8()?);
    let pretimeout_seconds = r.u8()?;
    let expiration_flags = r.u8()?;
    let initial_countdown = r.u16().ok();
    let present_countdown = if initial_countdown.is_some() {
        r.u16().ok()
    } else {
        None
    };
    Ok(WatchdogTimer {
        timer_use,
        action,
        pretimeout_seconds,
        expiration_flags,
        initial_countdown,
        present_countdown,
        len: data.len(),
    })
}

/// Set Watchdog Timer request data.
pub fn set_watchdog_request(timer_use: u8, action: u8, countdown_tenths: u16) -> Vec<u8> {
    let c = countdown_tenths.to_le_bytes();
    // pre-timeout 0 s; clear the SMS/OS expiration flag
    vec![timer_use, action, 0x00, 0x10, c[0], c[1]]
}

/// Get Session Info for the current session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionInfo {
    pub user_id: u8,
    pub privilege: Option<Privilege>,
    pub channel: u8,
}

/// Decodes Get Session Info data.
pub fn parse_session_info(data: &[u8]) -> Result<SessionInfo, Malformed> {
    let mut r = Reader::new(data, "Get Session Info answer");
    let _handle = r.u8()?;
    let _possible = r.u8()?;
    let _active = r.u8()?;
    let user_id = r.u8()? & 0x3F;
    let privilege = Privilege::from_u8(r.u8()? & 0x0F);
    let channel = r.u8()? & 0x0F;
    Ok(SessionInfo {
        user_id,
        privilege,
        channel,
    })
}

/// Get Device ID, the parts worth showing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    pub device_id: u8,
    pub device_revision: u8,
    pub firmware: String,
    pub ipmi_version: String,
    pub manufacturer_id: u32,
    pub product_id: u16,
}

/// Decodes Get Device ID data (the 11 mandatory bytes).
pub fn parse_device_id(data: &[u8]) -> Result<DeviceId, Malformed> {
    let mut r = Reader::new(data, "Get Device ID answer");
    let device_id = r.u8()?;
    let device_revision = r.u8()? & 0x0F;
    let fw_major = r.u8()? & 0x7F;
    let fw_minor = r.u8()?;
    let ipmi = r.u8()?;
    let _support = r.u8()?;
    let m = r.take(3)?;
    let manufacturer_id = u32::from_le_bytes([m[0], m[1], m[2] & 0x0F, 0]);
    let product_id = r.u16()?;
    Ok(DeviceId {
        device_id,
        device_revision,
        // the minor revision is BCD
        firmware: format!("{fw_major}.{fw_minor:02x}"),
        ipmi_version: format!("{}.{}", ipmi & 0x0F, ipmi >> 4),
        manufacturer_id,
        product_id,
    })
}

/// Formats a 16-byte IPMI GUID (sent least significant byte first) as ipmitool does.
pub fn format_guid(raw: &[u8]) -> Result<String, Malformed> {
    if raw.len() < 16 {
        return Err(malformed(format!("GUID is {} bytes, not 16", raw.len())));
    }
    let b: Vec<u8> = raw[..16].iter().rev().copied().collect();
    let h = hex::encode(&b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> SessionKeys {
        SessionKeys::from_sik(CipherSuite::Three, &[7u8; 20])
    }

    #[test]
    fn encrypted_payloads_round_trip_for_every_length_around_a_block() {
        let k = keys();
        for len in 0..50 {
            let plain: Vec<u8> = (0..len as u8).collect();
            let enc = k.encrypt(&plain, [9u8; 16]);
            assert_eq!(enc.len() % 16, 0, "len {len}");
            assert_eq!(&enc[..16], &[9u8; 16]);
            assert_eq!(k.decrypt(&enc).unwrap(), plain, "len {len}");
        }
    }

    #[test]
    fn a_wrong_key_is_caught_by_the_pad_check_or_gives_other_bytes() {
        let enc = keys().encrypt(b"chassis control", [1u8; 16]);
        let other = SessionKeys::from_sik(CipherSuite::Three, &[8u8; 20]);
        assert_ne!(other.decrypt(&enc).ok(), Some(b"chassis control".to_vec()));
    }

    #[test]
    fn signed_packets_parse_and_verify_and_tampering_is_detected() {
        let k = keys();
        for len in 0..12 {
            let payload: Vec<u8> = (0..len as u8).collect();
            let bytes = build_packet(payload::IPMI, false, 0xA0A2A3A4, 5, &payload, Some(&k));
            // session header through next header is a multiple of four
            assert_eq!((bytes.len() - 4 - 12) % 4, 0);
            let p = parse_packet(&bytes, 12).unwrap();
            assert_eq!(p.payload, &payload[..]);
            assert_eq!(p.session_id, 0xA0A2A3A4);
            assert_eq!(p.sequence, 5);
            assert!(p.authenticated && !p.encrypted);
            verify(&p, &k).unwrap();
            let mut bad = bytes.clone();
            bad[10] ^= 1;
            let p = parse_packet(&bad, 12).unwrap();
            assert!(verify(&p, &k).is_err());
        }
    }

    #[test]
    fn ipmi_requests_carry_valid_checksums() {
        // ipmitool's Get Chassis Status as sent to a BMC at 0x20 with rqSeq 1
        let m = ipmi_request(netfn::CHASSIS, cmd::GET_CHASSIS_STATUS, 1, &[]);
        assert_eq!(m, vec![0x20, 0x00, 0xE0, 0x81, 0x04, 0x01, 0x7A]);
    }

    #[test]
    fn ipmi_responses_decode_and_bad_checksums_are_refused() {
        // response to the request above: netfn 0x01 (chassis response), cc 0, power on
        let mut m = vec![0x81, 0x04];
        m.push(checksum(&m));
        let body = [0x20, 0x04, 0x01, 0x00, 0x01, 0x00, 0x00];
        m.extend_from_slice(&body);
        m.push(checksum(&body));
        let r = parse_ipmi_response(&m).unwrap();
        assert_eq!((r.netfn, r.rq_seq, r.cmd, r.cc), (0x01, 1, 0x01, 0x00));
        assert!(parse_chassis_status(&r.data).unwrap().power_on);
        let mut bad = m.clone();
        bad[8] ^= 0x10;
        assert!(parse_ipmi_response(&bad).is_err());
    }

    #[test]
    fn ipmi_sim_short_watchdog_answer_gives_no_running_state() {
        // what ipmi_sim 2.0.33 answers after `Set Watchdog Timer 0x44 0x02 ... 50`
        let w = parse_watchdog(&[0x44, 0x02, 0x00, 0x00, 0x32, 0x00]).unwrap();
        assert_eq!(w.action, WatchdogAction::PowerDown);
        assert_eq!(w.initial_countdown, Some(50));
        assert_eq!(w.present_countdown, None);
        assert_eq!(w.running(), None);
        let full = parse_watchdog(&[0x44, 0x02, 0, 0, 0x32, 0, 0x20, 0]).unwrap();
        assert_eq!(full.running(), Some(true));
        assert_eq!(full.present_countdown, Some(32));
        assert!(parse_watchdog(&[0x44, 0x02, 0]).is_err());
    }

    #[test]
    fn sessionless_packets_round_trip() {
        let m = ipmi_request(netfn::APP, cmd::GET_CHANNEL_AUTH_CAPS, 1, &[0x8E, 0x04]);
        let p = build_sessionless(&m);
        assert_eq!(p.len(), 4 + 10 + m.len());
        assert_eq!(parse_sessionless(&p).unwrap(), &m[..]);
        assert!(parse_sessionless(&p[..p.len() - 1]).is_err());
        let a = parse_channel_auth(&[0x01, 0x97, 0x06, 0x02, 0, 0, 0, 0]).unwrap();
        assert!(a.ipmi20 && a.null_usernames && !a.anonymous_login && !a.kg_set);
    }

    #[test]
    fn guids_print_like_ipmitool() {
        // ipmi_sim's lan.conf guid for port 6269, as `ipmitool mc guid` shows it
        let raw = hex::decode("a123456789abcdefa12345670000187d").unwrap();
        assert_eq!(
            format_guid(&raw).unwrap(),
            "7d180000-6745-23a1-efcd-ab89674523a1"
        );
    }

    #[test]
    fn session_info_gives_the_privilege() {
        // ipmi_sim: `raw 0x06 0x3d 0x00` → 01 3f 01 02 04 11
        let s = parse_session_info(&[0x01, 0x3F, 0x01, 0x02, 0x04, 0x11]).unwrap();
        assert_eq!(s.privilege, Some(Privilege::Administrator));
        assert_eq!((s.user_id, s.channel), (2, 1));
    }

    #[test]
    fn device_id_decodes_ipmi_sims_answer() {
        let d = parse_device_id(&[
            0x00, 0x03, 0x09, 0x08, 0x02, 0x9F, 0x91, 0x12, 0x00, 0x02, 0x0F,
        ])
        .unwrap();
        assert_eq!(d.ipmi_version, "2.0");
        assert_eq!(d.manufacturer_id, 0x1291);
        assert_eq!(d.product_id, 0x0F02);
        assert_eq!(d.firmware, "9.08");
    }

    #[test]
    fn handshake_codes_agree_between_console_and_a_bmc_computing_them_independently() {
        let rakp = Rakp {
            console_sid: 0x0102_0304,
            bmc_sid: 0xA0A2_A3A4,
            rm: [3u8; 16],
            role: 0x14,
            username: b"admin".to_vec(),
            suite: CipherSuite::Three,
        };
        let rc = [5u8; 16];
        let guid = [6u8; 16];
        let kuid = b"password";
        // RAKP 2 as the BMC computes it (IPMI v2.0 §13.31), written out by hand
        let mut input = Vec::new();
        input.extend_from_slice(&0x0102_0304u32.to_le_bytes());
        input.extend_from_slice(&0xA0A2_A3A4u32.to_le_bytes());
        input.extend_from_slice(&[3u8; 16]);
        input.extend_from_slice(&rc);
        input.extend_from_slice(&guid);
        input.extend_from_slice(&[0x14, 5]);
        input.extend_from_slice(b"admin");
        assert_eq!(
            input.len(),
            63,
            "ipmitool's rakp2 mac input is 63 bytes for admin"
        );
        assert_eq!(
            rakp.expected_rakp2_code(kuid, &rc, &guid),
            CipherSuite::Three.mac(kuid, &[&input])
        );
        // a 20-byte zero-padded key gives the same HMAC (ipmitool pads the password)
        let mut padded = [0u8; 20];
        padded[..8].copy_from_slice(kuid);
        assert_eq!(
            rakp.expected_rakp2_code(&padded, &rc, &guid),
            rakp.expected_rakp2_code(kuid, &rc, &guid)
        );
        let m3 = rakp.message3(9, kuid, &rc);
        assert_eq!(m3.len(), 28);
        assert_eq!(&m3[4..8], &0xA0A2_A3A4u32.to_le_bytes());
    }

    proptest! {
        #[test]
        fn no_decoder_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_packet(&bytes, 12);
            let _ = parse_packet(&bytes, 16);
            let _ = parse_sessionless(&bytes);
            let _ = parse_channel_auth(&bytes);
            let _ = parse_packet(&bytes, 99);
            let _ = parse_open_session_response(&bytes);
            let _ = parse_rakp2(&bytes, 20);
            let _ = parse_rakp2(&bytes, 32);
            let _ = parse_rakp4(&bytes, 12);
            let _ = parse_rakp4(&bytes, 16);
            let _ = parse_ipmi_response(&bytes);
            let _ = parse_chassis_status(&bytes);
            let _ = parse_watchdog(&bytes);
            let _ = parse_session_info(&bytes);
            let _ = parse_device_id(&bytes);
            let _ = format_guid(&bytes);
            let _ = keys().decrypt(&bytes);
        }

        #[test]
        fn mutated_valid_packets_never_panic_and_never_verify_when_changed(
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let k = keys();
            let enc = k.encrypt(&payload, [4u8; 16]);
            let bytes = build_packet(payload::IPMI, true, 1, 2, &enc, Some(&k));
            let p = parse_packet(&bytes, 12).unwrap();
            prop_assert!(verify(&p, &k).is_ok());
            prop_assert_eq!(k.decrypt(p.payload).unwrap(), payload);
            let mut bad = bytes.clone();
            let i = flip.index(bad.len());
            bad[i] ^= 1 << bit;
            if let Ok(p) = parse_packet(&bad, 12) {
                // the RMCP header is not signed; anything else must fail verification
                if i >= 4 {
                    prop_assert!(verify(&p, &k).is_err());
                }
                let _ = k.decrypt(p.payload);
            }
        }

        #[test]
        fn truncated_packets_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..40), cut in any::<prop::sample::Index>()) {
            let k = keys();
            let bytes = build_packet(payload::IPMI, false, 1, 2, &payload, Some(&k));
            let n = cut.index(bytes.len());
            let _ = parse_packet(&bytes[..n], 12);
        }
    }
}
