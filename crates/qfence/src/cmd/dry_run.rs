//! `qfence plan dry-run FILE PLAN --to SITE [--assume BINDING=READING]...`: the whole ordered
//! action list of a failover of PLAN to SITE, offline, assuming every command is done and
//! every check holds, except the readings given with `--assume` (`dc1[0]=unknown`: dc1's
//! BMC does not answer). Nothing is called: no controller, no orchestrator. Each step names
//! its controller, capability, resource and the sites whose orchestrators may run it.
//!
//! Exit codes: 0 the move would complete; 1 the file, plan, site or binding is wrong (as the
//! other commands); 2 a malformed `--assume`; 3 the move would stop (the last line says where
//! and why).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use qfence_core::dry_run::{MoveKind, dry_run, parse_assumption};
use qfence_model::config::ValidatedConfig;

use super::{EXIT_INVALID, EXIT_USAGE, Format};

/// Exit code for a move that would stop before completing.
pub const EXIT_WOULD_STOP: i32 = 3;

/// Loads FILE (parse and validate) and prints the dry run to standard output, as JSON when
/// `json`, assuming every check holds except the readings in `assume` (`dc1[0]=unknown`).
pub fn run(
    file: &Path,
    plan: &str,
    to: &str,
    assume: &[String],
    kind: MoveKind,
    json: bool,
) -> anyhow::Result<i32> {
    let format = if json { Format::Json } else { Format::Human };
    let loaded = match super::load(file, format) {
        Ok(l) => l,
        Err(_) => return Ok(i32::from(EXIT_INVALID)),
    };
    if !json && !loaded.warnings.is_empty() {
        eprintln!(
            "{}: {} warning(s); `qfence config check` lists them",
            file.display(),
            loaded.warnings.len()
        );
    }
    run_with(
        &loaded.config,
        plan,
        to,
        assume,
        kind,
        json,
        &mut std::io::stdout().lock(),
    )
}

/// Prints the dry run of a failover of `plan` to `to` for an already validated configuration.
pub fn run_with(
    config: &ValidatedConfig,
    plan: &str,
    to: &str,
    assume: &[String],
    kind: MoveKind,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    let mut assumed = BTreeMap::new();
    for a in assume {
        match parse_assumption(a) {
            Ok((k, v)) => {
                assumed.insert(k, v);
            }
            Err(e) => {
                eprintln!("error: --assume {e}");
                return Ok(i32::from(EXIT_USAGE));
            }
        }
    }
    let r = match dry_run(config, plan, &assumed, to, kind) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(i32::from(EXIT_INVALID));
        }
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, &r)?;
        writeln!(out)?;
    } else {
        for line in r.lines() {
            writeln!(out, "{line}")?;
        }
    }
    Ok(if r.completes { 0 } else { EXIT_WOULD_STOP })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> ValidatedConfig {
        let text = include_str!("../../../../examples/lab.yaml");
        qfence_model::config::load_str(text, "examples/lab.yaml")
            .expect("the lab example is valid")
            .config
    }

    #[test]
    fn the_lab_failover_to_dc2_prints_every_step_in_order() {
        let mut out = Vec::new();
        let code = run_with(
            &lab(),
            "erp-db",
            "dc2",
            &[],
            MoveKind::Failover,
            false,
            &mut out,
        )
        .unwrap();
        assert_eq!(code, 0);
        let text = String::from_utf8(out).unwrap();
        let steps: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            steps,
            [
                "  1. fences              fence       dc1      bmc-dc1 power.off pve-dc1-01  run from: dc1, dc2",
                "  2. fences              fence       dc1      pve-dc1 vm.stop pve-dc1-01/101  run from: dc1",
                "  3. verify              check       dc1      bmc-dc1 power.off pve-dc1-01  run from: dc1, dc2",
                "  4. verify              check       dc1      pve-dc1 vm.stop pve-dc1-01/101  run from: dc1",
                "  5. readiness           check       dc2      pve-dc2 replication.lag 101-1  run from: dc2",
                "  6. unfence             unfence     dc2      bmc-dc2 power.on pve-dc2-01  run from: dc2, dc1",
                "  7. unfence             unfence     dc2      pve-dc2 vm.start pve-dc2-01/101  run from: dc2",
                "  8. switchover          switchover  dc2      pve-dc2 vm.start pve-dc2-01/101  run from: dc2",
                "  9. commit              commit      dc2      owner dc2 at generation 2 (compare-and-set on generation 1)",
                " 10. service             service     -        fgt-edge vip.own vip-erp-db  run from: dc1, dc2  point at dc2",
                "Completes: erp-db now served by dc2 at generation 2",
            ]
        );
        assert!(
            text.contains("bmc-dc1 power.off pve-dc1-01  run from: dc1, dc2"),
            "{text}"
        );
        assert!(text.ends_with("Completes: erp-db now served by dc2 at generation 2\n"));
    }

    #[test]
    fn a_switchover_checks_the_targets_readiness_before_touching_the_owner() {
        let mut out = Vec::new();
        let code = run_with(
            &lab(),
            "erp-db",
            "dc2",
            &[],
            MoveKind::Switchover,
            false,
            &mut out,
        )
        .unwrap();
        assert_eq!(code, 0);
        let text = String::from_utf8(out).unwrap();
        let steps: Vec<&str> = text.lines().skip(1).collect();
        assert!(steps[0].contains("preflight") && steps[0].contains("replication.lag 101-1"));
        // A planned switchover stops the resource, not the host (issue 19): vm.stop, no
        // power.off at the old owner.
        assert!(
            steps[1].contains("fences") && steps[1].contains("vm.stop"),
            "{text}"
        );
        // power.off is only read back (verify), never performed.
        assert!(
            !steps
                .iter()
                .any(|l| l.contains(" fence ") && l.contains("power.off")),
            "{text}"
        );
        assert!(
            text.starts_with("Dry run: switchover of erp-db from dc1 to dc2"),
            "{text}"
        );
        assert!(text.ends_with("Completes: erp-db now served by dc2 at generation 2\n"));
    }

    #[test]
    fn an_unknown_site_or_plan_is_refused_with_the_invalid_exit_code() {
        let mut out = Vec::new();
        assert_eq!(
            run_with(
                &lab(),
                "erp-db",
                "dc9",
                &[],
                MoveKind::Failover,
                false,
                &mut out
            )
            .unwrap(),
            1
        );
        assert_eq!(
            run_with(
                &lab(),
                "nope",
                "dc2",
                &[],
                MoveKind::Failover,
                false,
                &mut out
            )
            .unwrap(),
            1
        );
        assert!(out.is_empty());
    }

    #[test]
    fn an_assumed_unknown_fence_shows_where_the_move_would_stop() {
        let mut out = Vec::new();
        let assume = ["dc1[0]=unknown".to_owned()];
        let code = run_with(
            &lab(),
            "erp-db",
            "dc2",
            &assume,
            MoveKind::Failover,
            false,
            &mut out,
        )
        .unwrap();
        assert_eq!(code, EXIT_WOULD_STOP);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("switchover  dc2"), "{text}");
        assert!(
            text.lines().last().unwrap().starts_with("Stops: "),
            "{text}"
        );
        let mut out = Vec::new();
        let bad = ["dc1[0]".to_owned()];
        assert_eq!(
            run_with(
                &lab(),
                "erp-db",
                "dc2",
                &bad,
                MoveKind::Failover,
                false,
                &mut out
            )
            .unwrap(),
            2
        );
        let nine = ["dc1[9]=unknown".to_owned()];
        assert_eq!(
            run_with(
                &lab(),
                "erp-db",
                "dc2",
                &nine,
                MoveKind::Failover,
                false,
                &mut out
            )
            .unwrap(),
            1
        );
    }

    #[test]
    fn json_output_is_the_dry_run_structure() {
        let mut out = Vec::new();
        run_with(
            &lab(),
            "erp-db",
            "dc2",
            &[],
            MoveKind::Failover,
            true,
            &mut out,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["steps"].as_array().unwrap().len(), 10);
        assert_eq!(v["steps"][9]["capability"], "vip.own");
        assert_eq!(v["completes"], true);
    }
}
