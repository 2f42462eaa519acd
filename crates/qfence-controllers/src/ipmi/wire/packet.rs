//! RMCP+ session packets and the IPMI messages they carry: building, parsing, verifying;
//! and the sessionless packets of Get Channel Authentication Capabilities.

use super::*;

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

pub(super) fn checksum(bytes: &[u8]) -> u8 {
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
