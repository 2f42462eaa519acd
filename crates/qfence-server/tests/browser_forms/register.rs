//! Controller registration in four steps.

use anyhow::{Result, ensure};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refuses_bad_input_at_its_field_and_keeps_every_step() -> Result<()> {
    let (served, _lab) = lab_console().await?;
    let b = Browser::start(&served.base, "register-validation").await?;
    b.sign_in(ADMIN).await?;
    b.open("/controllers/new").await?;
    b.wait_for("#register-form").await?;

    phase("Step 1 shows only the chosen type's connection fields");
    pick(&b, "type", "proxmox").await?;
    ensure!(b.wait_for("#token_id").await?.is_displayed().await?);
    ensure!(!b.wait_for("#agent").await?.is_displayed().await?);
    pick(&b, "type", "redfish").await?;
    ensure!(!b.wait_for("#token_id").await?.is_displayed().await?);
    ensure!(b.wait_for("#username").await?.is_displayed().await?);

    phase("A name taken and a password in the endpoint are refused next to their fields");
    b.fill("#name", "bmc-dc1").await?;
    pick(&b, "site", "dc1").await?;
    b.click("input[name='reach'][value='dc2']").await?;
    b.fill("#endpoint", "https://qfence:hunter2@127.0.0.1:9443")
        .await?;
    b.fill("#username", "qfence").await?;
    b.submit("#next").await?;
    b.wait_for(".field-error[data-for='name']").await?;
    ensure!(errors_at(&b, "name").await?[0].contains("already exists"));
    let at_endpoint = errors_at(&b, "endpoint").await?;
    ensure!(
        at_endpoint
            .iter()
            .any(|m| m.contains("inline credentials are refused")),
        "the inline password is refused: {at_endpoint:?}"
    );
    ensure!(
        value(&b, "endpoint").await? == "https://qfence@127.0.0.1:9443",
        "and not sent back"
    );
    ensure!(value(&b, "username").await? == "qfence");
    ensure!(
        b.wait_for("input[name='reach'][value='dc2']")
            .await?
            .is_selected()
            .await?
    );
    b.screenshot("1-step1-refused").await?;

    phase("Fixed, step 2 asks for a secret's name and refuses a pasted credential");
    b.fill("#name", "bmc-dc3").await?;
    b.fill("#endpoint", "https://127.0.0.1:9443").await?;
    b.submit("#next").await?;
    b.wait_for("#secret").await?;
    b.fill("#secret", "3f1c2d9e-8a7b-4c6d-9e0f-1a2b3c4d5e6f")
        .await?;
    b.submit("#next").await?;
    b.wait_for(".field-error[data-for='secret']").await?;
    ensure!(errors_at(&b, "secret").await?[0].contains("not the name of a secret"));
    ensure!(
        value(&b, "secret").await?.is_empty(),
        "the credential is not sent back"
    );
    b.screenshot("2-step2-refused").await?;

    phase("Back to step 1: everything typed is there");
    b.fill("#secret", "lab-redfish").await?;
    b.submit("#back").await?;
    b.wait_for("#name").await?;
    ensure!(value(&b, "name").await? == "bmc-dc3");
    ensure!(value(&b, "endpoint").await? == "https://127.0.0.1:9443");
    ensure!(value(&b, "type").await? == "redfish");
    b.submit("#next").await?;
    ensure!(
        value(&b, "secret").await? == "lab-redfish",
        "and the secret's name too"
    );
    b.quit().await
}

/// Fills step 1 for a Redfish BMC at dc1 that dc2 may call too.
async fn fill_step1(b: &Browser, name: &str, endpoint: &str) -> Result<()> {
    b.fill("#name", name).await?;
    pick(b, "type", "redfish").await?;
    pick(b, "site", "dc1").await?;
    b.click("input[name='reach'][value='dc2']").await?;
    b.fill("#endpoint", endpoint).await?;
    b.fill("#username", "qfence").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_walks_four_steps_to_a_registered_controller() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let b = Browser::start(&served.base, "register-walk").await?;
    b.sign_in(ADMIN).await?;
    b.open("/controllers").await?;
    b.click("#register-new").await?;
    b.wait_for("#register-form").await?;
    // A second controller for the lab's dc1 BMC: step 3 reaches the simulator.
    fill_step1(&b, "bmc-dc3", &lab.sims.bmc1.base_url()).await?;
    b.submit("#next").await?;
    b.fill("#secret", "lab-redfish").await?;
    b.submit("#next").await?;
    phase("Step 3: the test's identity and the simulator's fingerprint, pinned");
    let identity = b.wait_for("#identity").await?.text().await?;
    ensure!(!identity.trim().is_empty(), "an identity is shown");
    let fp = b.wait_for("#fingerprint").await?.text().await?;
    ensure!(
        fp.trim_start_matches("sha256:")
            .replace(':', "")
            .to_lowercase()
            == lab.sims.bmc1.fingerprint().to_lowercase(),
        "the page shows {fp}, the simulator's certificate is {}",
        lab.sims.bmc1.fingerprint()
    );
    b.click("#pin_fingerprint").await?;
    b.submit("#next").await?;
    phase("Step 4: grades, and the pin in what will be registered");
    b.wait_for("#grades").await?;
    ensure!(
        b.wait_for("#spec")
            .await?
            .value()
            .await?
            .unwrap_or_default()
            .contains(lab.sims.bmc1.fingerprint())
    );
    b.submit("#register").await?;
    b.wait_for_text("#registered", "bmc-dc3").await?;
    b.wait_for("tr[data-controller='bmc-dc3']").await?;
    b.screenshot("1-registered").await?;
    b.quit().await
}
