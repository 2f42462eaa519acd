//! The checks the driver contract names before every fence (docs/specs/controller.md §4),
//! run by the orchestrator that calls the controller.

use qfence_call::PreFence;
use qfence_controllers::AnyDriver;
use qfence_controllers::driver::{CallContext, Driver, DriverError, ErrorKind, Target};

/// The call the refusals name.
const CALL: &str = "pre-fence check";

/// The pre-fence checks of `pf` on `target`, within the fence's own deadline. `Err` is the
/// refusal to answer instead of fencing: `rejected` (nothing sent, the target as it was) when
/// a check found a mismatch, state unknown when a check could not be made.
pub(super) async fn pre_fence(
    d: &AnyDriver,
    ctx: &CallContext,
    target: &Target,
    pf: &PreFence,
) -> Result<(), DriverError> {
    let refused =
        |message: String| DriverError::new(ErrorKind::Rejected, d.id(), CALL, message, false);
    // The check's own kind (a timeout, the target unreachable): the fence was not sent, but
    // what the target is now was not read either.
    let unverified = |e: DriverError| {
        DriverError::new(
            e.kind,
            d.id(),
            CALL,
            format!("not fenced: the pre-fence check could not be made: {e}"),
            true,
        )
    };
    if let Some(pinned) = &pf.identity {
        let probe = d.probe(ctx).await.map_err(unverified)?;
        if probe.identity.id != *pinned {
            return Err(refused(format!(
                "not fenced: the pre-fence check found controller {} answering as {}, not as {pinned} \
                 pinned by its latest test: fencing through it could stop another system (test \
                 the controller again once the device is known to be the right one)",
                d.id(),
                probe.identity.id
            )));
        }
    }
    let problems = d.check_binding(ctx, target).await.map_err(unverified)?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(refused(format!(
            "not fenced: the pre-fence check of {} {} found: {}",
            target.capability,
            target.resource,
            problems.join("; ")
        )))
    }
}
