//! Registration against a real orchestrator (the runtime's backend, its cluster node and
//! drivers) and the lab's Redfish simulator: the fingerprint the page shows is the simulator's
//! certificate, and the grades come from the Redfish driver reading the simulator.

use std::sync::Arc;

use anyhow::{Result, ensure};
use qfence_server::runtime::RuntimeBackend;
use qfence_server::{ApiConfig, Metrics};

use super::lab::{self, Orchestrator, Sims};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_on_a_real_orchestrator_shows_the_bmcs_certificate_and_grades() -> Result<()> {
    let sims = Sims::start().await?;
    let o = Orchestrator::start(&sims.config_text(), false).await?;
    let backend = RuntimeBackend::new(&o.engine, sims.config_text(), lab::secrets());
    let app = qfence_server::router(
        Arc::new(backend),
        tokens(),
        Metrics::new(),
        &ApiConfig::default(),
    );
    let served = harness::serve(app).await?;
    let b = Browser::start(&served.base, "register-daemon").await?;
    b.sign_in(ADMIN).await?;

    phase("Steps 1 and 2: a second controller for dc1's BMC, trusting the system roots");
    b.open("/controllers/new").await?;
    b.wait_for("#register-form").await?;
    b.fill("#name", "bmc-dc1-mgmt").await?;
    pick(&b, "type", "redfish").await?;
    pick(&b, "site", "dc1").await?;
    b.click("input[name='reach'][value='dc2']").await?;
    b.fill("#endpoint", &sims.bmc1.base_url()).await?;
    b.fill("#username", "qfence").await?;
    b.screenshot("1-type-and-connection").await?;
    b.click("#next").await?;
    b.fill("#secret", "lab-redfish").await?;
    b.screenshot("2-credentials").await?;
    b.click("#next").await?;

    phase("Step 3: the simulator's certificate fingerprint, to compare and pin");
    b.wait_for("#probe, #form-banner").await?;
    b.screenshot("3-connectivity").await?;
    let fp = b.wait_for("#fingerprint").await?.text().await?;
    let want = sims.bmc1.fingerprint();
    ensure!(
        fp.trim_start_matches("sha256:")
            .replace(':', "")
            .to_lowercase()
            == want.to_lowercase(),
        "the page shows {fp}, the simulator's certificate is {want}"
    );
    b.screenshot("3-connectivity").await?;
    b.click("#pin_fingerprint").await?;
    b.click("#next").await?;

    phase("Step 4: tested again through the pin, each capability graded by the driver");
    b.wait_for("#grades").await?;
    let power_off = b
        .wait_for("#grades tr[data-capability='power.off'] .grade")
        .await?
        .text()
        .await?;
    ensure!(
        ["proven", "inferred", "unverifiable"].contains(&power_off.as_str()),
        "power.off graded {power_off}"
    );
    ensure!(
        b.wait_for("#spec")
            .await?
            .value()
            .await?
            .unwrap_or_default()
            .contains(want)
    );
    b.screenshot("4-capabilities").await?;
    b.quit().await?;
    o.shutdown().await;
    sims.stop().await;
    Ok(())
}
