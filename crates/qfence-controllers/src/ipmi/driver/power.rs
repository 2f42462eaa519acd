//! Chassis power: reading it, and powering down or up until a read shows it done.

use super::*;

impl IpmiDriver {
    /// Reads power until it is `want_on`, re-opening the session whenever a read fails.
    /// Just before the caller's deadline it gives up with what it last read, so the error
    /// says more than "deadline passed".
    pub(super) async fn wait_power(
        &self,
        ctx: &CallContext,
        call: &str,
        mut session: Option<Session>,
        want_on: bool,
    ) -> Result<Reading, DriverError> {
        let mut delay = FIRST_POWER_POLL;
        let started = tokio::time::Instant::now();
        let mut last = String::from("no read succeeded");
        let give_up = |last: &str| {
            let word = if want_on { "on" } else { "off" };
            DriverError::new(
                ErrorKind::Timeout,
                &self.id,
                call,
                format!(
                    "power did not read {word} within {} ms of the command; last: {last}",
                    started.elapsed().as_millis()
                ),
                true,
            )
        };
        // A read still running at the deadline gives up a little before it, so this error
        // (with the last read) wins the race with the caller's plain "deadline passed".
        let stop_at = ctx
            .deadline
            .checked_sub(GIVE_UP_MARGIN)
            .unwrap_or(ctx.deadline);
        loop {
            if tokio::time::Instant::now() + delay >= stop_at {
                return Err(give_up(&last));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(POWER_POLL);
            let mut s = match session.take() {
                Some(s) => s,
                None => match tokio::time::timeout_at(stop_at, self.open(call)).await {
                    Err(_) => return Err(give_up(&last)),
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) if e.kind == ErrorKind::Auth => {
                        return Err(DriverError {
                            state_unknown: true,
                            ..e
                        });
                    }
                    Ok(Err(e)) => {
                        last = e.message.clone();
                        tracing::debug!(controller = %self.id, call, error = %e, "Could not re-open the IPMI session to read power");
                        continue;
                    }
                },
            };
            let Ok(read) =
                tokio::time::timeout_at(stop_at, self.chassis_status(&mut s, call)).await
            else {
                // Dropping the session closes it without waiting.
                return Err(give_up(&last));
            };
            match read {
                Ok(st) if st.power_on == want_on => {
                    s.close().await;
                    return Ok(self.power_reading(ctx, st));
                }
                Ok(st) => {
                    last = self.power_reading(ctx, st).detail;
                    session = Some(s);
                }
                Err(e) if e.kind == ErrorKind::Unreachable || e.kind == ErrorKind::Protocol => {
                    last = e.message.clone();
                    tracing::debug!(controller = %self.id, call, error = %e, "Reading power failed; re-opening the IPMI session");
                }
                Err(e) => {
                    return Err(DriverError {
                        state_unknown: true,
                        ..e
                    });
                }
            }
        }
    }
}

impl IpmiDriver {
    /// Makes power read `want_on`: reads it, sends Chassis Control if needed, then polls.
    /// A command whose answer was lost is not an error yet: the next round re-opens the
    /// session, reads power again and, if still needed, sends the command again (power down
    /// and power up are idempotent).
    pub(super) async fn set_power(
        &self,
        ctx: &CallContext,
        want_on: bool,
    ) -> Result<Reading, DriverError> {
        let (call, name, control, word) = if want_on {
            (
                "power.on",
                "Chassis Control power up",
                CHASSIS_POWER_UP,
                "on",
            )
        } else {
            (
                "power.off",
                "Chassis Control power down",
                CHASSIS_POWER_DOWN,
                "off",
            )
        };
        let mut sent = false;
        let mut last = None;
        for _ in 0..3 {
            let opened = self.open(call).await;
            let mut s = match opened {
                Ok(s) => s,
                Err(e) if sent => {
                    last = Some(DriverError {
                        state_unknown: true,
                        ..e
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            let st = self
                .chassis_status(&mut s, call)
                .await
                .map_err(|e| DriverError {
                    state_unknown: sent || e.state_unknown,
                    ..e
                })?;
            if st.power_on == want_on {
                s.close().await;
                let mut r = self.power_reading(ctx, st);
                if !sent {
                    r.detail = format!("already {word}: {}", r.detail);
                }
                return Ok(r);
            }
            match self
                .command(
                    &mut s,
                    call,
                    name,
                    (netfn::CHASSIS, cmd::CHASSIS_CONTROL),
                    &[control],
                    true,
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(controller = %self.id, call, "Sent {name}; reading power back");
                    return self.wait_power(ctx, call, Some(s), want_on).await;
                }
                Err(e) if e.state_unknown => {
                    tracing::warn!(controller = %self.id, call, error = %e, "The answer to {name} was lost; reading power again");
                    sent = true;
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            DriverError::new(
                ErrorKind::Unreachable,
                &self.id,
                call,
                "no round completed",
                true,
            )
        }))
    }

    pub(super) async fn check_power(&self, ctx: &CallContext) -> Result<Reading, DriverError> {
        const CALL: &str = "power.off check";
        let mut s = self.open(CALL).await?;
        let st = self.chassis_status(&mut s, CALL).await?;
        s.close().await;
        Ok(self.power_reading(ctx, st))
    }
}
