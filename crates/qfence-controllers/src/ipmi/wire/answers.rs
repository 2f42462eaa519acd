//! The command answers qfence reads: channel authentication, chassis status, the
//! watchdog timer, session info, device ID and the GUID.

use super::*;

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
    pub(super) fn from_bits(b: u8) -> Self {
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
