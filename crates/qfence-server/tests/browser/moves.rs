//! What happened, drawn: a lost site's failover as timeline bars on the plan's page (live),
//! the sites page with each site's orchestrators, plans and alarms, and the overview of 2,000
//! plans with its counts, filters and paging.

use std::time::Duration;

use anyhow::{Result, ensure};
use qfence_lab::faults::Cut;
use qfence_lab::redfish::PowerState;
use qfence_model::PlanId;
use qfence_runtime::auth::{Access, Caller};
use qfence_runtime::backend::Backend;
use qfence_runtime::dto::{FailoverRequest, VerdictDto};
use qfence_server::testing::lab::eventually;

use crate::harness::{self, Browser, By, VIEWER, lab_console, phase};
use crate::{mark_page, same_page};

/// The labels of the bars in the newest move's chart.
async fn bar_labels(b: &Browser) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in b
        .driver
        .find_all(By::Css(
            "#plan-timeline .move:first-child g.span text.label",
        ))
        .await?
    {
        out.push(e.text().await?);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_drawn_step_by_step_on_the_plan_page_live() -> Result<()> {
    let (served, lab) = lab_console().await?;
    lab.verdict_is("dc2", VerdictDto::Fenced).await?;
    let b = Browser::start(&served.base, "timeline").await?;
    b.sign_in(VIEWER).await?;

    phase("steady: the plan's page has no move to draw");
    b.open("/plans/erp-db").await?;
    b.wait_for_text("#plan-timeline", "No failover or switchover recorded")
        .await?;
    mark_page(&b).await?;

    phase("dc1's host loses power: the failover appears on the page as it goes, no reload");
    ensure!(lab.sims.bmc1.set_power("pve-dc1-01", PowerState::Off));
    b.wait_for_text_within(
        "#plan-timeline",
        "failover dc1 → dc2",
        Duration::from_secs(60),
    )
    .await?;
    b.wait_for_text_within("#plan-timeline .move", "done", Duration::from_secs(60))
        .await?;
    ensure!(same_page(&b).await?, "the timeline was updated in place");

    phase("each step is a bar, in order, with its duration");
    let labels = bar_labels(&b).await?;
    let at = |l: &str| labels.iter().position(|x| x == l);
    for step in [
        "health lost",
        "fences",
        "read-back",
        "switchover",
        "commit",
        "service",
    ] {
        ensure!(at(step).is_some(), "{step} in {labels:?}");
    }
    ensure!(
        at("health lost") < at("fences") && at("fences") < at("read-back"),
        "in order: {labels:?}"
    );
    ensure!(
        at("switchover") < at("commit") && at("commit") < at("service"),
        "in order: {labels:?}"
    );
    let mut last_x = 0.0_f64;
    for g in b
        .driver
        .find_all(By::Css("#plan-timeline .move:first-child g.span rect.bar"))
        .await?
    {
        let x: f64 = g.attr("x").await?.unwrap_or_default().parse()?;
        let w: f64 = g.attr("width").await?.unwrap_or_default().parse()?;
        ensure!(
            w > 0.0 && x + 0.001 >= last_x,
            "bars left to right: x {x} after {last_x}"
        );
        last_x = x;
    }
    let durations = b
        .wait_for("#plan-timeline .move:first-child g.span text.duration")
        .await?
        .text()
        .await?;
    ensure!(
        durations.ends_with(" s") || durations.ends_with(" ms"),
        "{durations:?}"
    );
    b.screenshot("1-plan-page").await?;
    b.screenshot_of("#plan-timeline .move", "2-failover-bars")
        .await?;

    phase("the table beneath says the same");
    b.click("#plan-timeline .move:first-child details summary")
        .await?;
    b.wait_for_text("#plan-timeline table.spans", "read-back")
        .await?;
    b.screenshot_of("#plan-timeline .move", "3-failover-table")
        .await?;
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sites_page_shows_each_sites_orchestrators_plans_and_alarms() -> Result<()> {
    let (served, lab) = lab_console().await?;
    lab.verdict_is("dc2", VerdictDto::Fenced).await?;
    let b = Browser::start(&served.base, "sites").await?;
    b.sign_in(VIEWER).await?;

    phase("from the menu: dc1 leads and owns erp-db, dc2 stands by, no alarms");
    b.click("header nav a[href='/sites']").await?;
    b.wait_for_text("#site-dc1", "dc1-a").await?;
    b.wait_for_text("#site-dc1", "leader").await?;
    b.wait_for_text("#site-dc1", "Owns 1 plan").await?;
    b.wait_for_text("#site-dc1 .owned", "erp-db").await?;
    b.wait_for_text("#site-dc2", "stands by for 1").await?;
    b.wait_for_text("#site-dc2 .alarms", "None").await?;
    b.screenshot("1-steady").await?;

    phase("dc1's BMC stops answering and an operator fails over: the move halts, dc1's alarm");
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
    // The fences step's retries take a while (three attempts, seconds apart).
    eventually(Duration::from_secs(150), "erp-db halted", || async {
        let st = lab.backend.status().await.ok()?;
        st.plans
            .iter()
            .find(|p| p.plan == "erp-db")?
            .halted
            .as_ref()?;
        Some(())
    })
    .await?;
    b.open("/sites").await?;
    b.wait_for_text("#site-dc1 .alarms", "halted, waiting for an operator")
        .await?;
    let dc2 = b.wait_for("#site-dc2 .alarms").await?.text().await?;
    ensure!(
        dc2.contains("None"),
        "a halted move is its owner's alarm: {dc2:?}"
    );
    b.screenshot("2-alarm-at-dc1").await?;

    phase("the overview counts it and filters to it");
    b.open("/").await?;
    b.wait_for_text("#count-alarms", "1 with alarms").await?;
    b.click("#count-alarms").await?;
    b.wait_for_text("#overview", "halted, waiting for an operator")
        .await?;
    b.wait_for_text("#page-info", "1–1 of 1 · page 1 of 1")
        .await?;
    b.screenshot("3-overview-alarms").await?;
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overview_of_2000_plans_counts_filters_and_pages() -> Result<()> {
    const PLANS: usize = 2_000;
    // Every page reads the status of 2,000 plans while the engine runs them: patience.
    const SLOW: Duration = Duration::from_secs(120);
    // A slow cycle and no failover within the test: it is about the console reading 2,000
    // plans, not about the engine checking them all on a shared machine.
    let lab = qfence_server::testing::LabRuntime::start_scaled(
        PLANS,
        "    interval_seconds: 60\n    recovery_after_seconds: 1800\n    \
         failover_after_seconds: 3600\n    fence_timeout_seconds: 10\n",
        Duration::from_secs(60),
    )
    .await?;
    let app = qfence_server::router(
        lab.backend(),
        harness::tokens(),
        qfence_runtime::Metrics::new(),
        &qfence_server::ApiConfig::default(),
    );
    let served = harness::serve(app).await?;
    let b = Browser::start(&served.base, "overview-2000").await?;
    b.sign_in(VIEWER).await?;

    phase("the counts cover all 2,000 plans; the first page shows 50");
    b.open("/").await?;
    b.wait_for_text_within("#count-plans", "2000", SLOW).await?;
    b.wait_for_text_within("#page-info", "1–50 of 2000", SLOW)
        .await?;
    b.wait_for_text_within("#page-info", "page 1 of 40", SLOW)
        .await?;
    let rows = b.driver.find_all(By::Css("#overview tbody tr")).await?;
    ensure!(rows.len() == 50, "{} rows on a page", rows.len());
    b.wait_for_text_within("#counts", "steady", SLOW).await?;
    b.screenshot("1-first-page").await?;

    phase("next page, then the last");
    b.click("#next-page").await?;
    b.wait_for_text_within("#page-info", "51–100 of 2000", SLOW)
        .await?;
    b.wait_for_text_within("#overview", "p00050", SLOW).await?;
    b.open("/?page=40").await?;
    b.wait_for_text_within("#overview", "p01999", SLOW).await?;
    ensure!(
        b.driver.find_all(By::Css("#next-page")).await?.is_empty(),
        "no next page after the last"
    );

    phase("filters: by name, by owner and phase; a bad page number is refused at its field");
    b.open("/").await?;
    b.fill("#o-name", "p0123").await?;
    b.click("#filter-plans").await?;
    b.wait_for_text_within("#page-info", "1–10 of 10 matching (2000 plans)", SLOW)
        .await?;
    b.wait_for_text_within("#overview", "p01239", SLOW).await?;
    b.screenshot("2-filtered-by-name").await?;
    b.open("/?owner=dc2").await?;
    b.wait_for_text_within("#overview", "No plan matches these filters", SLOW)
        .await?;
    b.open("/?owner=dc1&phase=steady&page=2").await?;
    b.wait_for_text_within("#page-info", "page 2 of", SLOW)
        .await?;
    b.open("/?page=two").await?;
    b.wait_for_text_within("#page-error", "not a page number", SLOW)
        .await?;
    b.screenshot("3-bad-page").await?;

    phase("the live part keeps the page's filters");
    b.open("/?name=p0001").await?;
    b.wait_for_text_within("#live-state", "live", SLOW).await?;
    mark_page(&b).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.wait_for_text_within("#page-info", "of 10 matching", SLOW)
        .await?;
    ensure!(same_page(&b).await?, "no reload");
    b.quit().await?;
    drop(served);
    lab.stop().await;
    Ok(())
}
