//! The RMCP+ session handshake: Open Session and RAKP messages 1 to 4, and the keys and
//! codes each side computes.

use super::*;

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
