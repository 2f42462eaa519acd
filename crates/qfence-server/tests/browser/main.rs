//! The web console in a real browser: Debian's headless chromium driven over WebDriver
//! (see `harness.rs`). Each test tells a story and leaves screenshots in
//! `target/console-screenshots/`.
//!
//! Every story runs over the lab running for real (`qfence_server::testing::LabRuntime`: the
//! lab's simulators, a one-voter cluster, the engine's loop); a story changes the simulators
//! to make something happen.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

mod harness;
mod instance_ha;
#[path = "../runtime/lab.rs"]
#[allow(dead_code)]
mod lab;
mod moves;
// The runtime tests' small cloud on the Nova simulator.
#[path = "../runtime/nova_cloud.rs"]
mod nova_cloud;

use std::time::Duration;

use anyhow::{Result, ensure};
use qfence_lab::faults::Cut;
use qfence_lab::redfish::PowerState;
use qfence_model::PlanId;
use qfence_runtime::auth::{Access, Caller};
use qfence_runtime::backend::Backend;
use qfence_runtime::dto::{FailoverRequest, PauseRequest, SwitchoverRequest, VerdictDto};
use qfence_server::testing::lab::eventually;

use harness::{Browser, By, lab_console};

pub use harness::{ADMIN, OPERATOR, VIEWER, phase, tokens};

/// Marks the page so a test can tell a live update from a reload.
async fn mark_page(b: &Browser) -> Result<()> {
    b.driver
        .execute("window.__qfence_marker = 'same page';", vec![])
        .await?;
    Ok(())
}

async fn same_page(b: &Browser) -> Result<bool> {
    let v = b
        .driver
        .execute("return window.__qfence_marker || null;", vec![])
        .await?;
    Ok(v.json().as_str() == Some("same page"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_shows_the_overview() -> Result<()> {
    let (served, _lab) = lab_console().await?;
    let b = Browser::start(&served.base, "sign-in").await?;

    phase("a browser without a session is sent to the sign-in page");
    b.open("/plans/erp-db").await?;
    b.wait_for("#token").await?;
    ensure!(b.path().await?.starts_with("/login"), "on the sign-in page");
    b.screenshot("1-login").await?;

    phase("a wrong token is refused on the page");
    b.fill("#token", "not-a-token").await?;
    b.click("form[action='/login'] button[type=submit]").await?;
    b.wait_for_text(".field-error", "not known").await?;

    phase("the viewer's token opens the page asked for, then the overview");
    b.fill("#token", VIEWER).await?;
    b.click("form[action='/login'] button[type=submit]").await?;
    b.wait_until("back on the plan's page", || async {
        Ok(b.path().await? == "/plans/erp-db")
    })
    .await?;
    b.open("/").await?;
    b.wait_for_text("#overview", "erp-db").await?;
    b.screenshot("2-overview").await?;

    phase("a viewer is offered no actions");
    b.open("/plans/erp-db").await?;
    b.wait_for_text("main", "need an operator token").await?;
    ensure!(
        b.driver.find_all(By::Css("form.action")).await?.is_empty(),
        "no action form for a viewer"
    );

    phase("signing out ends the session");
    b.click("form[action='/logout'] button").await?;
    b.wait_for("#token").await?;
    b.open("/").await?;
    b.wait_for("#token").await?;
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_and_the_plan_page_follow_a_failover_live() -> Result<()> {
    let (served, lab) = lab_console().await?;
    lab.verdict_is("dc2", VerdictDto::Fenced).await?;
    let b = Browser::start(&served.base, "live").await?;
    b.sign_in(VIEWER).await?;
    b.wait_for_text("#overview", "dc2 FENCED").await?;
    mark_page(&b).await?;
    b.wait_for_text("#live-state", "live").await?;

    phase("dc1's BMC stops answering, an operator fails over: the overview follows, no reload");
    lab.sims.bmc1.faults().set_unreachable(Some(Cut::Refuse));
    let oncall = Caller {
        name: "oncall".into(),
        access: Access::Operator,
    };
    let req = FailoverRequest {
        target: Some("dc2".into()),
        expected_generation: 1,
        reason: Some("dc1 lost".into()),
    };
    lab.backend
        .failover(&oncall, &PlanId::new("erp-db")?, &req)
        .await?;
    b.wait_for_text("#overview", "fences to dc2").await?;
    b.screenshot("1-overview-fencing").await?;
    ensure!(same_page(&b).await?, "the overview was updated in place");

    phase("the plan page shows the same; dc1 never proven fenced, the failover halts");
    b.open("/plans/erp-db").await?;
    b.wait_for_text("#plan-status", "fences to dc2").await?;
    mark_page(&b).await?;
    // The fences step's retries take a while (three attempts, seconds apart).
    b.wait_for_text_within("#history", "halted", Duration::from_secs(90))
        .await?;
    b.wait_for_text("#plan-status-live", "halted").await?;
    ensure!(same_page(&b).await?, "the plan page was updated in place");
    b.screenshot("2-plan-alarm").await?;
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirming_fenced_without_a_reason_keeps_the_form_and_says_why() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let b = Browser::start(&served.base, "confirm-fenced").await?;
    b.sign_in(OPERATOR).await?;
    b.open("/plans/erp-db").await?;

    phase("confirm fenced with no reason: refused next to the field");
    b.click("#confirm-fenced").await?;
    b.wait_for_text("#reason-error", "how you know").await?;
    let site = b.wait_for("#c-site").await?.value().await?;
    ensure!(site.as_deref() == Some("dc2"), "the site is kept: {site:?}");
    b.screenshot("1-reason-missing").await?;

    phase("with a reason it is asked once more, then done");
    b.fill("#c-reason", "host unplugged, checked at the rack")
        .await?;
    b.click("#confirm").await?;
    b.wait_for_text(".notice", "accepted").await?;
    let events = lab.all_events();
    ensure!(
        events.iter().any(
            |e| e.data["reason"] == "host unplugged, checked at the rack"
                || e.message.contains("host unplugged, checked at the rack")
        ),
        "the reason is in the event log"
    );
    b.screenshot("2-confirmed").await?;
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_page_pages_and_filters_and_keeps_a_bad_filter() -> Result<()> {
    let (served, lab) = lab_console().await?;
    // More than two pages of five: an operator pauses and resumes erp-db four times, and
    // the engine records what it does about each.
    let oncall = Caller {
        name: "oncall".into(),
        access: Access::Operator,
    };
    let plan = PlanId::new("erp-db")?;
    for i in 0..4 {
        let req = PauseRequest {
            reason: Some(format!("round {i}")),
        };
        lab.backend.pause(&oncall, &plan, &req).await?;
        lab.backend.resume(&oncall, &plan, &req).await?;
    }
    eventually(Duration::from_secs(30), "twelve records", || async {
        (lab.all_events().len() >= 12).then_some(())
    })
    .await?;
    let b = Browser::start(&served.base, "events").await?;
    b.sign_in(VIEWER).await?;
    b.open("/events?limit=5").await?;
    b.wait_for("#events").await?;
    b.click("#next-page").await?;
    b.wait_for_text("#events", "erp-db").await?;
    b.screenshot("1-page-2").await?;

    phase("a bad kind is refused next to the field, the rest of the filter kept");
    b.open("/events").await?;
    b.fill("#f-kind", "decisoin").await?;
    b.fill("#f-plan", "erp-db").await?;
    b.click("#filter").await?;
    b.wait_for_text("#filters", "is not a kind of record")
        .await?;
    let plan = b.wait_for("#f-plan").await?.value().await?;
    let kind = b.wait_for("#f-kind").await?.value().await?;
    ensure!(plan.as_deref() == Some("erp-db") && kind.as_deref() == Some("decisoin"));
    b.screenshot("2-bad-kind").await?;
    b.fill("#f-kind", "decision").await?;
    b.click("#filter").await?;
    b.wait_for_text("#events", "no action: erp-db owned by dc1")
        .await?;
    b.open("/orchestrators").await?;
    b.wait_for_text("#orchestrators", "dc1-a").await?;
    b.screenshot("3-orchestrators").await?;
    b.quit().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_site_fails_over_live_on_the_overview_and_the_plan_page() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let b = Browser::start(&served.base, "runtime-failover").await?;
    b.sign_in(VIEWER).await?;

    phase("steady: dc1 owns erp-db, dc2 reads FENCED");
    b.wait_for_text_within("#overview", "dc2 FENCED", Duration::from_secs(30))
        .await?;
    mark_page(&b).await?;
    b.screenshot("1-steady").await?;

    phase("dc1's host loses power: the overview follows the failover to dc2, live");
    ensure!(lab.sims.bmc1.set_power("pve-dc1-01", PowerState::Off));
    b.wait_for_text_within("#overview", "dc2 owner", Duration::from_secs(60))
        .await?;
    b.wait_for_text_within("#overview", "dc1 FENCED", Duration::from_secs(30))
        .await?;
    ensure!(same_page(&b).await?, "the overview was updated in place");
    b.screenshot("2-failed-over").await?;

    phase("the plan page shows the new owner, the history and the diagram");
    b.open("/plans/erp-db").await?;
    b.wait_for_text("#plan-status", "dc2").await?;
    b.wait_for_text("#history", "committed: owner dc2").await?;
    b.wait_for("#diagram").await?;
    b.screenshot("3-plan").await?;
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_is_confirmed_with_its_dry_run_then_followed_live() -> Result<()> {
    let (served, lab) = lab_console().await?;
    let b = Browser::start(&served.base, "switchover").await?;
    b.sign_in(OPERATOR).await?;
    b.wait_for_text_within("#overview", "dc2 FENCED", Duration::from_secs(30))
        .await?;

    phase("from the overview to the plan's page; the dry run of a switchover");
    b.click("#overview a[href='/plans/erp-db']").await?;
    b.wait_for("#diagram").await?;
    b.screenshot("1-plan").await?;
    b.screenshot_of(".diagram", "1-diagram").await?;
    b.driver
        .find(By::Css("#dry option[value='switchover']"))
        .await?
        .click()
        .await?;
    b.driver
        .find(By::Css("#dry-target option[value='dc2']"))
        .await?
        .click()
        .await?;
    b.click("#dry-run").await?;
    b.wait_for("#dry-result").await?;

    phase("switch over to dc2: a confirmation step first");
    b.fill("#sw-reason", "patching dc1").await?;
    b.click("#switchover").await?;
    b.wait_for_text("h1", "Switch erp-db over to dc2").await?;
    b.wait_for("#dry-result").await?;
    b.screenshot("2-confirm").await?;
    let reason = b.wait_for("#c-reason").await?.value().await?;
    ensure!(
        reason.as_deref() == Some("patching dc1"),
        "the reason is kept"
    );
    b.click("#confirm").await?;

    phase("accepted; the plan page follows it to dc2 without a reload");
    b.wait_for_text(".notice", "accepted").await?;
    mark_page(&b).await?;
    b.wait_for_text_within("#plan-status", "dc2 owner", Duration::from_secs(60))
        .await?;
    b.wait_for_text_within("#plan-status", "steady", Duration::from_secs(30))
        .await?;
    ensure!(same_page(&b).await?, "updated in place");
    b.wait_for_text("#history", "patching dc1").await?;
    b.wait_until("the actions carry generation 2", || async {
        Ok(action_generations(&b).await? == ["2"; 5])
    })
    .await?;
    ensure!(
        b.wait_for("#actions-updated").await?.is_displayed().await?,
        "the page says its actions were updated"
    );
    b.screenshot("3-switched").await?;
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}

/// The generation each action form on the plan's page carries.
async fn action_generations(b: &Browser) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in b
        .driver
        .find_all(By::Css("#plan-actions input[name=expected_generation]"))
        .await?
    {
        out.push(e.value().await?.unwrap_or_default());
    }
    Ok(out)
}

/// The values of the options of the `<select>` `css`.
async fn options(b: &Browser, css: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in b.driver.find_all(By::Css(format!("{css} option"))).await? {
        out.push(e.value().await?.unwrap_or_default());
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_pages_actions_follow_a_switchover_made_elsewhere_and_a_click_then_acts()
-> Result<()> {
    let (served, lab) = lab_console().await?;
    lab.verdict_is("dc2", VerdictDto::Fenced).await?;
    let b = Browser::start(&served.base, "actions-live").await?;
    b.sign_in(OPERATOR).await?;

    phase("the plan's page at generation 1: a switchover to dc2 is offered");
    b.open("/plans/erp-db").await?;
    b.wait_for("#switchover").await?;
    b.wait_for_text("#live-state", "live").await?;
    mark_page(&b).await?;
    ensure!(
        options(&b, "#sw-site").await? == ["dc2"],
        "dc2 is the target"
    );
    ensure!(action_generations(&b).await? == ["1"; 5], "every form at 1");
    // Typed before the updates: the operator's words survive them.
    b.fill("#cf-reason", "unplugged at the rack").await?;

    phase("another operator pauses the plan through the API: no move offered, no reload");
    // A state that holds until it is changed, so the page cannot miss it between two polls.
    let other = Caller {
        name: "night-shift".into(),
        access: Access::Operator,
    };
    let plan = PlanId::new("erp-db")?;
    let why = PauseRequest {
        reason: Some("storage firmware".into()),
    };
    lab.backend.pause(&other, &plan, &why).await?;
    b.wait_for_text("#plan-actions", "the plan is paused: resume it first")
        .await?;
    b.wait_for("#resume").await?;
    ensure!(
        b.driver
            .find_all(By::Css("#switchover, #failover, #pause"))
            .await?
            .is_empty(),
        "no move offered while paused, and no pause"
    );
    ensure!(
        b.wait_for("#actions-updated").await?.is_displayed().await?,
        "the page says its actions were updated"
    );
    b.screenshot_of("#plan-actions", "1-paused").await?;

    phase("resumed, then switched over to dc2 through the API: the actions follow");
    lab.backend.resume(&other, &plan, &why).await?;
    b.wait_for("#switchover").await?;
    let req = SwitchoverRequest {
        target: "dc2".into(),
        expected_generation: 1,
        reason: Some("patching dc1".into()),
    };
    lab.backend.switchover(&other, &plan, &req).await?;
    b.wait_for_text_within("#plan-status", "dc2 owner", Duration::from_secs(60))
        .await?;
    b.wait_until(
        "the actions carry generation 2, a switchover back to dc1",
        || async {
            Ok(action_generations(&b).await? == ["2"; 5]
                && options(&b, "#sw-site").await? == ["dc1"])
        },
    )
    .await?;
    ensure!(same_page(&b).await?, "updated in place");
    let notice = b.wait_for_text("#actions-updated", "generation 2").await?;
    ensure!(notice.contains("owned by dc2"), "{notice}");
    let kept = b.wait_for("#cf-reason").await?.value().await?;
    ensure!(
        kept.as_deref() == Some("unplugged at the rack"),
        "the typed reason is kept: {kept:?}"
    );
    b.screenshot_of("#plan-actions", "2-updated").await?;

    phase("a click acts on what the page shows: back to dc1, accepted at generation 2");
    b.fill("#sw-reason", "dc1 patched").await?;
    b.submit("#switchover").await?;
    b.wait_for_text("h1", "Switch erp-db over to dc1").await?;
    b.submit("#confirm").await?;
    let accepted = b.wait_for_text(".notice", "accepted").await?;
    ensure!(accepted.contains("generation 2"), "{accepted}");
    b.screenshot("3-accepted").await?;
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}
