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

mod answers;
mod crypto;
mod handshake;
mod packet;
pub use answers::*;
pub use crypto::*;
pub use handshake::*;
pub use packet::*;

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

// ---------------------------------------------------------------------------------------------
// Packets

// ---------------------------------------------------------------------------------------------
// Session setup: Open Session and RAKP 1-4

// ---------------------------------------------------------------------------------------------
// IPMI messages

// ---------------------------------------------------------------------------------------------
// Command answers

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
