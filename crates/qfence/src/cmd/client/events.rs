//! `qfence events`: the event log from the API, filtered, optionally followed; a plan's
//! moves step by step (`--plan P --timeline`, the API's timeline: what the console draws);
//! and `qfence events verify FILE`, offline.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use qfence_runtime::events::EventPage;
use qfence_runtime::timeline::{PlanTimeline, duration_text};

use super::http::{Api, seg};
use super::{ApiArgs, Outcome, seconds, table};
use crate::cmd::Format;
use crate::cmd::events::EventsCommand;

/// `qfence events [FILTERS] [--follow]`, or `qfence events verify FILE`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub offline: Option<EventsCommand>,
    /// Only records about this plan.
    #[arg(long)]
    pub plan: Option<String>,
    /// Only records about this site.
    #[arg(long)]
    pub site: Option<String>,
    /// Only records of this kind.
    #[arg(long, value_parser = ["decision", "command", "result", "operator", "alarm", "config", "leadership"])]
    pub kind: Option<String>,
    /// Only records after this seq.
    #[arg(long, default_value_t = 0)]
    pub after: u64,
    /// At most this many records (the latest ones), unless following.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Keep printing new records as they come, until Ctrl-C.
    #[arg(long, conflicts_with = "timeline")]
    pub follow: bool,
    /// The plan's failovers and switchovers, each step with its start, end and duration
    /// (needs --plan): the timeline the console's plan page draws.
    #[arg(long, requires = "plan", conflicts_with_all = ["site", "kind"])]
    pub timeline: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

pub fn run(args: EventsArgs, format: Format) -> anyhow::Result<ExitCode> {
    if let Some(offline) = args.offline {
        return crate::cmd::events::run(offline, format);
    }
    if args.timeline {
        return Ok(super::run(
            format,
            "events --timeline",
            timeline(args, format),
        ));
    }
    Ok(super::run(format, "events", list(args, format)))
}

async fn timeline(a: EventsArgs, format: Format) -> Outcome {
    let api = Api::new(&a.api)?;
    let plan = a.plan.as_deref().unwrap_or_default();
    let t: PlanTimeline = api
        .get(&format!("/api/v1/plans/{}/timeline", seg(plan)))
        .await?;
    if format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&t).expect("serialises"));
    } else {
        print_timeline(&t, table::now_ms());
    }
    Ok(())
}

/// Each move, newest last: a line saying what it was and how it ended, then its steps.
fn print_timeline(t: &PlanTimeline, now_ms: u64) {
    if t.moves.is_empty() {
        println!("{}: no failover or switchover recorded", t.plan);
        return;
    }
    for (i, m) in t.moves.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let took = m.end_ms.unwrap_or(now_ms).saturating_sub(m.start_ms);
        println!(
            "{} {} {} -> {}: {}, started {}, {} {} ({})",
            t.plan,
            m.kind.as_str(),
            m.from,
            m.target,
            m.outcome.as_str(),
            table::datetime(m.start_ms),
            if m.end_ms.is_some() { "took" } else { "for" },
            duration_text(took),
            m.why
        );
        let mut tab = table::new(&["STEP", "START", "END", "DURATION", "WHAT"]);
        for s in &m.spans {
            let mut what: Vec<String> = Vec::new();
            if s.attempts > 1 {
                what.push(format!("{} attempts", s.attempts));
            }
            if let Some(h) = &s.halted {
                what.push(format!("halted: {h}"));
            }
            what.extend(
                s.ops
                    .iter()
                    .map(|o| o.result.clone().unwrap_or(o.what.clone())),
            );
            tab.add_row(vec![
                s.step.as_str().to_owned(),
                table::datetime(s.start_ms),
                table::maybe(s.end_ms),
                match s.duration_ms {
                    Some(d) => duration_text(d),
                    None => format!(
                        "{} (under way)",
                        duration_text(now_ms.saturating_sub(s.start_ms))
                    ),
                },
                what.join("; "),
            ]);
        }
        table::print(&tab);
    }
}

fn query(a: &EventsArgs, after: u64) -> String {
    let mut q = format!("/api/v1/events?after={after}&limit=1000");
    if let Some(p) = &a.plan {
        q.push_str(&format!("&plan={}", seg(p)));
    }
    if let Some(s) = &a.site {
        q.push_str(&format!("&site={}", seg(s)));
    }
    if let Some(k) = &a.kind {
        q.push_str(&format!("&kind={}", seg(k)));
    }
    q
}

fn print_events(events: &[qfence_runtime::events::Event], format: Format, header: bool) {
    if format == Format::Json {
        for e in events {
            println!("{}", serde_json::to_string(e).expect("serialises"));
        }
        return;
    }
    if events.is_empty() {
        if header {
            println!("no events");
        }
        return;
    }
    // Followed records come without a header: they continue the table printed first.
    let mut t = if header {
        table::new(&[
            "SEQ", "TIME", "KIND", "PLAN", "SITE", "GEN", "ACTOR", "MESSAGE",
        ])
    } else {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::NOTHING);
        t
    };
    for e in events {
        t.add_row(vec![
            e.seq.to_string(),
            table::datetime(e.time_ms),
            e.kind.as_str().to_owned(),
            e.plan.clone().unwrap_or_else(|| "-".into()),
            e.site.clone().unwrap_or_else(|| "-".into()),
            e.generation.map_or("-".into(), |g| g.to_string()),
            e.actor.clone(),
            e.message.clone(),
        ]);
    }
    table::print(&t);
}

async fn list(a: EventsArgs, format: Format) -> Outcome {
    let api = Api::new(&a.api)?;
    // Read every page after `after`, keep the last `limit`: the log is read oldest first.
    let mut after = a.after;
    let mut all = Vec::new();
    loop {
        let page: EventPage = api.get(&query(&a, after)).await?;
        let n = page.events.len();
        if let Some(last) = page.events.last() {
            after = last.seq;
        }
        all.extend(page.events);
        if !a.follow && all.len() > a.limit {
            all.drain(..all.len() - a.limit);
        }
        if page.next_after.is_none() || n == 0 {
            break;
        }
    }
    print_events(&all, format, true);
    if !a.follow {
        return Ok(());
    }
    let every = seconds(1.0, "interval")?;
    // One signal listener for the whole follow: one made afresh per poll misses a Ctrl-C that
    // arrives while a request is out.
    let follow = async {
        loop {
            tokio::time::sleep(every.min(Duration::from_secs(1))).await;
            let page: EventPage = match api.get(&query(&a, after)).await {
                Ok(p) => p,
                Err(e) if e.transient().is_some() => continue,
                Err(e) => return Err(e),
            };
            if let Some(last) = page.events.last() {
                after = last.seq;
            }
            print_events(&page.events, format, false);
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        r = follow => r,
    }
}
