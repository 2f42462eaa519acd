//! The BMC watchdog as a dead-man switch (ADR 0013): arming, renewing, disarming and
//! reading it back.

use super::*;

/// The countdown a watchdog binding asks for, in seconds.
pub(super) fn watchdog_seconds(target: &Target) -> Result<u32, String> {
    match target.param(ControllerType::Ipmi, TIMEOUT_PARAM) {
        None => Ok(DEFAULT_WATCHDOG_SECONDS),
        Some(v) => v
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|s| (1..=MAX_WATCHDOG_SECONDS).contains(s))
            .ok_or_else(|| {
                format!(
                    "params.{TIMEOUT_PARAM}: {v:?} is not a whole number of seconds from 1 to {MAX_WATCHDOG_SECONDS}"
                )
            }),
    }
}

/// The binding's countdown in tenths of a second, as Set Watchdog Timer carries it.
pub(super) fn watchdog_tenths(target: &Target) -> Result<u16, String> {
    // At most 6553 s: 65530 tenths fit.
    watchdog_seconds(target).map(|s| (s * 10) as u16)
}

/// What a watchdog read says about "armed", given whether a Reset was just accepted.
/// `Err` means the state cannot be told from what the BMC sent.
pub(super) fn watchdog_armed(
    w: &WatchdogTimer,
    reset_accepted: bool,
) -> Result<(bool, String), String> {
    let countdown = w
        .initial_countdown
        .map(|c| format!("{}.{} s", c / 10, c % 10))
        .unwrap_or_else(|| "unread".into());
    let described = format!(
        "Get Watchdog Timer: action {}, initial countdown {countdown}, {} of {} answer bytes",
        w.action.as_str(),
        w.len,
        wire::WATCHDOG_ANSWER_LEN
    );
    if w.action != WatchdogAction::PowerDown {
        // Whatever the timer does, its expiry powers nothing off.
        return Ok((false, format!("{described}: not armed")));
    }
    match w.running() {
        Some(running) => {
            let present = w
                .present_countdown
                .map(|c| format!(", present countdown {}.{} s", c / 10, c % 10))
                .unwrap_or_default();
            let state = if running { "running" } else { "stopped" };
            Ok((running, format!("{described}, timer {state}{present}")))
        }
        None if reset_accepted => Ok((
            true,
            format!(
                "{described}; running because Reset Watchdog Timer was just accepted (the answer is too short to show the running bit)"
            ),
        )),
        None => Err(format!(
            "{described}: too short to show whether the timer runs, so whether the dead-man is armed is unknown"
        )),
    }
}

impl IpmiDriver {
    /// Reads the watchdog back (Get Watchdog Timer): it holds when the timer runs, with
    /// action power-down and the countdown the binding sets (`want_tenths`). A countdown set
    /// by someone else is NOT HELD, never armed: a longer one would make "it has fired by
    /// now" premature. `reset_accepted`: a Reset Watchdog Timer was just accepted in this
    /// session (what a short answer's running state is taken from). Closes the session: the
    /// read-back is each call's last exchange.
    pub(super) async fn watchdog_read_back(
        &self,
        ctx: &CallContext,
        mut s: Session,
        call: &str,
        reset_accepted: bool,
        want_tenths: u16,
    ) -> Result<Reading, DriverError> {
        let w = self.watchdog(&mut s, call).await;
        s.close().await;
        let w = w?;
        let (holds, detail) = watchdog_armed(&w, reset_accepted)
            .map_err(|m| DriverError::new(ErrorKind::Protocol, &self.id, call, m, true))?;
        if w.action != WatchdogAction::PowerDown {
            return Ok(ctx.reading(holds, detail));
        }
        match w.initial_countdown {
            Some(got) if got == want_tenths => Ok(ctx.reading(holds, detail)),
            Some(got) => Ok(ctx.reading(false,
                format!(
                    "{detail}: the countdown is {}.{} s, not the {}.{} s qfence sets (set by someone else), so it is not qfence's dead-man",
                    got / 10,
                    got % 10,
                    want_tenths / 10,
                    want_tenths % 10
                ),
            )),
            None => Err(DriverError::new(
                ErrorKind::Protocol,
                &self.id,
                call,
                format!("{detail}: the countdown is not in the answer, so whether it is qfence's cannot be told"),
                true,
            )),
        }
    }

    pub(super) async fn arm(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog arm";
        let seconds = watchdog_seconds(target).map_err(|m| self.bad_params(CALL, m))?;
        let (mut s, tenths) = self.watchdog_session(CALL, target).await?;
        self.set_watchdog(&mut s, CALL, USE_SMS_DONT_STOP, ACTION_POWER_DOWN, tenths)
            .await?;
        self.command(
            &mut s,
            CALL,
            "Reset Watchdog Timer",
            (netfn::APP, cmd::RESET_WATCHDOG),
            &[],
            true,
        )
        .await?;
        let r = self.watchdog_read_back(ctx, s, CALL, true, tenths).await?;
        tracing::info!(controller = %self.id, seconds, armed = r.holds, "Armed the BMC watchdog");
        Ok(r)
    }

    pub(super) async fn renew_watchdog(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog renew";
        let (mut s, tenths) = self.watchdog_session(CALL, target).await?;
        let reset = s.request(netfn::APP, cmd::RESET_WATCHDOG, &[]).await;
        match reset {
            Ok(r) if r.cc == 0 => {}
            Ok(r) if r.cc == 0x80 => {
                s.close().await;
                return Err(DriverError::new(
                    ErrorKind::Rejected,
                    &self.id,
                    CALL,
                    "Reset Watchdog Timer answered 0x80: the watchdog was never set since the BMC started (a BMC reset or firmware update clears it), so there is nothing to renew: arm it (perform) first",
                    false,
                ));
            }
            Ok(r) => {
                s.close().await;
                return Err(self.cc_error(CALL, "Reset Watchdog Timer", r.cc));
            }
            Err(f) => {
                let unknown = f.maybe_delivered;
                return Err(self.failed(CALL, f, unknown));
            }
        }
        self.watchdog_read_back(ctx, s, CALL, true, tenths).await
    }

    pub(super) async fn disarm(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog disarm";
        // A bad countdown does not stop a disarm: the default one is what it reads back.
        let tenths = (watchdog_seconds(target).unwrap_or(DEFAULT_WATCHDOG_SECONDS) * 10) as u16;
        let mut s = self.open(CALL).await?;
        self.set_watchdog(&mut s, CALL, USE_SMS_STOP, ACTION_NONE, tenths)
            .await?;
        let r = self.watchdog_read_back(ctx, s, CALL, false, tenths).await?;
        if r.holds {
            return Err(DriverError::new(
                ErrorKind::Rejected,
                &self.id,
                CALL,
                format!(
                    "the watchdog still reads armed after disarming: {}",
                    r.detail
                ),
                true,
            ));
        }
        tracing::info!(controller = %self.id, "Disarmed the BMC watchdog");
        Ok(r)
    }

    pub(super) async fn check_watchdog(
        &self,
        ctx: &CallContext,
        target: &Target,
    ) -> Result<Reading, DriverError> {
        const CALL: &str = "watchdog check";
        let (s, tenths) = self.watchdog_session(CALL, target).await?;
        self.watchdog_read_back(ctx, s, CALL, false, tenths).await
    }

    /// A session for the watchdog call `call`, with the countdown `target`'s binding sets (in
    /// tenths): a bad countdown is refused before anything is sent.
    async fn watchdog_session(
        &self,
        call: &str,
        target: &Target,
    ) -> Result<(Session, u16), DriverError> {
        let tenths = watchdog_tenths(target).map_err(|m| self.bad_params(call, m))?;
        Ok((self.open(call).await?, tenths))
    }

    /// Set Watchdog Timer in `s`: `timer_use` and `action`, counting down from `tenths`.
    async fn set_watchdog(
        &self,
        s: &mut Session,
        call: &str,
        timer_use: u8,
        action: u8,
        tenths: u16,
    ) -> Result<(), DriverError> {
        let request = wire::set_watchdog_request(timer_use, action, tenths);
        let set = (netfn::APP, cmd::SET_WATCHDOG);
        self.command(s, call, "Set Watchdog Timer", set, &request, true)
            .await
            .map(drop)
    }
}
