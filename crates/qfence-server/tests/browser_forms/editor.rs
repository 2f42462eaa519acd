//! The plan editor: choices narrow as the user picks, a rejected field keeps what was typed,
//! and the fixed form is staged and applied.

use anyhow::{Result, ensure};
use qfence_runtime::Backend;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_editor_offers_only_what_fits_and_keeps_a_rejected_edit() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let backend = lab.backend.clone();
    let b = Browser::start(&served.base, "plan-editor").await?;
    b.sign_in(ADMIN).await?;

    phase("The edit form shows erp-db at generation 1");
    b.open("/plans/erp-db/edit").await?;
    b.wait_for("#plan-form").await?;
    ensure!(value(&b, "expected_generation").await? == "1");
    ensure!(value(&b, "b:dc1:0:controller").await? == "bmc-dc1");
    b.screenshot("1-edit").await?;

    phase("Picking a controller offers only its capabilities, a capability only its roles");
    let row = "b:dc1:4";
    pick(&b, &format!("{row}:controller"), "pve-dc1").await?;
    let caps = offered(&b, &format!("{row}:capability")).await?;
    ensure!(
        caps == ["vm.stop", "vm.start", "vm.status", "replication.lag"],
        "pve-dc1 (proxmox) offers {caps:?}"
    );
    pick(&b, &format!("{row}:capability"), "replication.lag").await?;
    let roles = offered(&b, &format!("{row}:role")).await?;
    ensure!(roles == ["readiness"], "replication.lag may be {roles:?}");
    ensure!(
        value(&b, &format!("{row}:role")).await? == "readiness",
        "the only role that fits is picked"
    );
    let placeholder = b
        .wait_for(&named(&format!("{row}:params")))
        .await?
        .attr("placeholder")
        .await?
        .unwrap_or_default();
    ensure!(placeholder.contains("max_age_seconds"), "{placeholder}");
    let mut listed = Vec::new();
    for o in b
        .driver
        .find_all(By::Css(format!("datalist[id='dl-{row}'] option")))
        .await?
    {
        listed.push(o.value().await?.unwrap_or_default());
    }
    ensure!(
        listed == ["101-1"],
        "the resource field offers what pve-dc1 discovered for replication.lag: {listed:?}"
    );
    // The job discovery offered: the runtime checks a binding's resource exists on apply.
    b.fill(&named(&format!("{row}:resource")), "101-1").await?;
    b.fill(&named(&format!("{row}:params")), "max_age_seconds=60")
        .await?;

    phase("A row added in dc2 offers a BMC's capabilities, and is removed again");
    b.click("fieldset[data-group='dc2'] .b-add").await?;
    let added = "b:dc2:5";
    pick(&b, &format!("{added}:controller"), "bmc-dc2").await?;
    ensure!(offered(&b, &format!("{added}:capability")).await? == ["power.off", "power.status"]);
    pick(&b, &format!("{added}:capability"), "power.status").await?;
    ensure!(offered(&b, &format!("{added}:role")).await? == ["health"]);
    b.click(&format!("tr[data-row='{added}'] .b-remove"))
        .await?;
    ensure!(
        b.driver
            .find_all(By::Css(named(&format!("{added}:controller"))))
            .await?
            .is_empty()
    );

    phase("A fence timeout longer than the failover delay is refused next to its field");
    b.fill("#fence_timeout_seconds", "90").await?;
    b.driver
        .execute(
            "document.querySelector(\"fieldset[data-group='service']\").scrollIntoView()",
            Vec::new(),
        )
        .await?;
    b.screenshot("2-filled-bottom").await?;
    b.click("#save").await?;
    b.wait_for(".field-error[data-for='fence_timeout_seconds']")
        .await?;
    let errs = errors_at(&b, "fence_timeout_seconds").await?;
    ensure!(
        errs.iter().any(|m| m.contains("(90)")),
        "the timing message names the value: {errs:?}"
    );
    ensure!(
        b.wait_for("#form-banner")
            .await?
            .text()
            .await?
            .contains("nothing was saved")
    );
    phase("Everything typed is kept");
    ensure!(value(&b, "fence_timeout_seconds").await? == "90");
    ensure!(value(&b, &format!("{row}:controller")).await? == "pve-dc1");
    ensure!(value(&b, &format!("{row}:capability")).await? == "replication.lag");
    ensure!(value(&b, &format!("{row}:resource")).await? == "101-1");
    ensure!(value(&b, &format!("{row}:params")).await? == "max_age_seconds=60");
    b.screenshot("3-rejected").await?;
    let id = qfence_model::PlanId::new("erp-db")?;
    ensure!(backend.plan(&id).await?.generation == 1, "nothing changed");

    phase("Fixed, the change is staged and applied on generation 1");
    b.fill("#fence_timeout_seconds", "").await?;
    b.click("#save").await?;
    b.wait_until("left the editor", || async {
        Ok(b.path().await? == "/plans/erp-db")
    })
    .await?;
    let v = backend.plan(&id).await?;
    ensure!(v.generation == 2, "applied: generation {}", v.generation);
    let added = &v.spec["instances"]["dc1"][4];
    ensure!(
        added["capability"] == "replication.lag" && added["resource"] == "101-1",
        "{added}"
    );
    ensure!(v.spec["instances"]["dc2"].as_array().map(Vec::len) == Some(4));
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_edit_shows_the_current_generation_and_applies_only_when_asked() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let backend = lab.backend.clone();
    let b = Browser::start(&served.base, "plan-stale").await?;
    b.sign_in(ADMIN).await?;
    b.open("/plans/erp-db/edit").await?;
    b.wait_for("#plan-form").await?;
    b.fill("#interval_seconds", "4").await?;

    phase("Meanwhile someone applies another change: erp-db moves to generation 2");
    let id = qfence_model::PlanId::new("erp-db")?;
    let mut spec = backend.plan(&id).await?.spec;
    spec["interval_seconds"] = serde_json::json!(8);
    let base = backend.config_source().await?;
    let checked = qfence_model::config::plan_api::check_plan(&base, "erp-db", &spec)
        .map_err(|i| anyhow::anyhow!("{i:?}"))?;
    let bob = qfence_runtime::Caller {
        name: "bob".into(),
        access: qfence_runtime::Access::Admin,
    };
    backend
        .stage_plan(
            &bob,
            qfence_runtime::CheckedPlan {
                name: id.clone(),
                spec,
                config: checked.value,
                warnings: checked.warnings,
            },
        )
        .await?;
    backend.apply_staged(&bob, &id, 1).await?;

    phase("Saving on generation 1 is refused as stale; the text typed is kept");
    b.click("#save").await?;
    let banner = b
        .wait_for_text("#form-banner", "it is at generation 2")
        .await?;
    ensure!(
        banner.contains("your edit started from generation 1"),
        "{banner}"
    );
    ensure!(value(&b, "interval_seconds").await? == "4");
    ensure!(backend.plan(&id).await?.spec["interval_seconds"] == 8);
    b.screenshot("1-stale").await?;

    phase("Applying mine over generation 2 is a deliberate second step");
    b.click("#apply-over").await?;
    b.wait_until("applied", || async {
        Ok(b.path().await? == "/plans/erp-db")
    })
    .await?;
    let v = backend.plan(&id).await?;
    ensure!(
        v.generation == 3 && v.spec["interval_seconds"] == 4,
        "{v:?}"
    );
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_plan_is_refused_then_created() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let backend = lab.backend.clone();
    let b = Browser::start(&served.base, "plan-new").await?;
    b.sign_in(ADMIN).await?;
    b.open("/plans/new").await?;
    b.wait_for("#plan-form").await?;

    phase("A name and one site only: refused, with the messages at the name and instances");
    b.fill("#name", "web").await?;
    pick(&b, "owner", "dc1").await?;
    pick(&b, "b:dc1:0:controller", "bmc-dc1").await?;
    pick(&b, "b:dc1:0:capability", "power.off").await?;
    b.fill(&named("b:dc1:0:resource"), "pve-dc1-01").await?;
    b.click(&named("b:dc1:0:required")).await?;
    b.click("#save").await?;
    b.wait_for("#form-banner").await?;
    let body = b.body_text().await?;
    ensure!(body.contains("nothing was saved"), "{body}");
    ensure!(value(&b, "name").await? == "web");
    ensure!(value(&b, "b:dc1:0:resource").await? == "pve-dc1-01");
    b.screenshot("1-refused").await?;

    phase("dc2 added: created at generation 1");
    pick(&b, "b:dc2:0:controller", "bmc-dc2").await?;
    pick(&b, "b:dc2:0:capability", "power.off").await?;
    b.fill(&named("b:dc2:0:resource"), "pve-dc2-01").await?;
    b.click("#save").await?;
    b.wait_until("created", || async { Ok(b.path().await? == "/plans/web") })
        .await?;
    let v = backend.plan(&qfence_model::PlanId::new("web")?).await?;
    ensure!(v.generation == 1);
    ensure!(v.spec["instances"]["dc1"][0]["required"] == true);
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_graded_failed_is_never_offered() -> Result<()> {
    let (served, lab) = lab_console().await?;
    // dc2's BMC account is read-only: its test grades power.off failed.
    lab.sims.bmc2.update(|s| {
        s.accounts
            .iter_mut()
            .for_each(|a| a.role = qfence_lab::redfish::Role::ReadOnly)
    });
    let test = lab.test_controller("bmc-dc2").await?;
    ensure!(
        test.grades.iter().any(
            |g| g.capability == "power.off" && g.grade == qfence_runtime::dto::GradeDto::Failed
        ),
        "{test:?}"
    );
    let b = Browser::start(&served.base, "plan-failed-capability").await?;
    b.sign_in(ADMIN).await?;
    b.open("/plans/new").await?;
    b.wait_for("#plan-form").await?;

    phase("bmc-dc2's power.off was graded failed: the script offers only power.status");
    pick(&b, "b:dc2:0:controller", "bmc-dc2").await?;
    let caps = offered(&b, "b:dc2:0:capability").await?;
    ensure!(caps == ["power.status"], "bmc-dc2 offers {caps:?}");
    phase("bmc-dc1, of the same type, still offers both");
    pick(&b, "b:dc1:0:controller", "bmc-dc1").await?;
    let caps = offered(&b, "b:dc1:0:capability").await?;
    ensure!(
        caps == ["power.off", "power.status"],
        "bmc-dc1 offers {caps:?}"
    );
    b.screenshot("1-not-offered").await?;
    b.quit().await
}
