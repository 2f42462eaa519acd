//! The fence-agent driver with real Pacemaker agents (`fence_dummy`, `fence_redfish` against
//! sushy-tools) and with small agents written here to pin down the calling convention.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use qfence_controllers::driver::fence_verdict;
use qfence_controllers::fence_agent::FenceAgentDriver;
use qfence_controllers::{Driver, ErrorKind, Secret};
use qfence_model::{ControllerId, FenceLevel, Grade, Verdict};
use tokio::time::Instant;

use crate::compliance::{self, Case, ctx, target};
use crate::emulators::{NODE1_UUID, Sushy, have_program, missing};

const T: Duration = Duration::from_secs(20);

fn opts(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
}

fn agent(name: &str, options: BTreeMap<String, String>, secret: Option<&str>) -> FenceAgentDriver {
    FenceAgentDriver::new(
        ControllerId::new("agent-dc1").unwrap(),
        name,
        &options,
        FenceLevel::Compute,
        secret.map(|s| Secret::new(s.into())),
    )
    .unwrap()
}

#[tokio::test]
async fn fence_dummy_passes_the_compliance_suite() {
    if !have_program("fence_dummy") {
        let Some(_) = missing("fence_dummy (Debian package fence-agents)") else {
            return;
        };
    }
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    std::fs::write(&status, "on").unwrap();
    let dummy = || {
        agent(
            "fence_dummy",
            opts(&[("status_file", status.to_str().unwrap())]),
            None,
        )
    };
    let case = Case {
        driver: dummy(),
        fence: target("power.off", "node1"),
        missing: None,
        action_timeout: T,
        slow_fence: false,
    };
    compliance::run(case).await;
    assert_eq!(std::fs::read_to_string(&status).unwrap(), "on");
    let p = dummy().probe(&ctx(T)).await.unwrap();
    assert_eq!(p.identity.facts["agent"], "fence_dummy");
    assert_eq!(p.grades[0].grade, Grade::Inferred, "{}", p.grades[0].reason);
}

#[tokio::test]
async fn fence_redfish_against_sushy_passes_the_compliance_suite() {
    if !have_program("fence_redfish") {
        let Some(_) = missing("fence_redfish (Debian package fence-agents)") else {
            return;
        };
    }
    let Some(s) = Sushy::start(Some("1-3")) else {
        return;
    };
    let port = s.port.to_string();
    let uri = format!("/redfish/v1/Systems/{NODE1_UUID}");
    let options = opts(&[
        ("ip", "127.0.0.1"),
        ("ipport", &port),
        ("username", "admin"),
        ("ssl_insecure", "1"),
        ("systems_uri", &uri),
    ]);
    let case = Case {
        driver: agent("fence_redfish", options.clone(), Some("password")),
        fence: target("power.off", "node1"),
        missing: None,
        action_timeout: Duration::from_secs(30),
        slow_fence: true,
    };
    compliance::run(case).await;
    let p = agent("fence_redfish", options.clone(), Some("password"))
        .probe(&ctx(T))
        .await
        .unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("ssl_insecure")),
        "{:?}",
        p.warnings
    );

    // A wrong password: the agent fails, the verdict is UNKNOWN.
    let bad = agent("fence_redfish", options, Some("wrong"));
    let c = bad.check(&ctx(T), &target("power.off", "node1")).await;
    assert_eq!(fence_verdict(&c), Verdict::Unknown, "{c:?}");
    assert!(!c.unwrap_err().message.contains("wrong"));
}

/// Writes an agent script into `dir`. It logs its arguments, stdin and environment, answers
/// metadata, and for `status` exits with the code in `dir/status_rc`.
fn script_agent(dir: &Path, name: &str, body: &str) {
    let list = if body.contains("list)") {
        "<action name=\"list\"/>"
    } else {
        ""
    };
    let script = format!(
        r#"#!/bin/sh
D={dir}
echo "$$" > $D/pid
printf '%s' "$*" > $D/args
env > $D/env
cat > $D/stdin
action=$(sed -n 's/^action=//p' $D/stdin)
case $action in
metadata) cat <<'XML'
<resource-agent name="{name}" shortdesc="test agent">
<parameters><parameter name="plug" unique="0" required="0"></parameters>
<actions><action name="on"/><action name="off"/><action name="status"/><action name="metadata"/>{list}</actions>
</resource-agent>
XML
exit 0;;
esac
{body}
"#,
        dir = dir.display()
    );
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn options_and_the_secret_go_on_stdin_never_on_the_command_line_or_environment() {
    let dir = tempfile::tempdir().unwrap();
    script_agent(dir.path(), "fence_probe", "echo 'Status: OFF'; exit 2");
    let d = agent(
        "fence_probe",
        opts(&[("ip", "127.0.0.1")]),
        Some("s3cr3t-pw"),
    )
    .with_search_path(vec![dir.path().into()]);
    let r = d
        .check(&ctx(T), &target("power.off", "plug7"))
        .await
        .unwrap();
    assert!(r.holds, "exit 2 means off: {}", r.detail);
    assert_eq!(fence_verdict(&Ok(r)), Verdict::Fenced);
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    assert_eq!(read("args"), "", "no command-line arguments");
    let stdin = read("stdin");
    for line in [
        "ip=127.0.0.1",
        "action=status",
        "plug=plug7",
        "password=s3cr3t-pw",
    ] {
        assert!(
            stdin.lines().any(|l| l == line),
            "{line} missing from stdin: {stdin}"
        );
    }
    let env = read("env");
    assert!(
        !env.contains("s3cr3t-pw") && !env.contains("QFENCE_SECRET"),
        "{env}"
    );
}

#[tokio::test]
async fn status_exit_codes_map_to_fenced_failed_and_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let rc = dir.path().join("status_rc");
    script_agent(
        dir.path(),
        "fence_codes",
        &format!("echo 'ERROR: pretend' >&2; exit $(cat {})", rc.display()),
    );
    let d = agent("fence_codes", opts(&[]), None).with_search_path(vec![dir.path().into()]);
    for (code, verdict) in [
        ("2", Verdict::Fenced),
        ("0", Verdict::Failed),
        ("1", Verdict::Unknown),
        ("7", Verdict::Unknown),
    ] {
        std::fs::write(&rc, code).unwrap();
        let c = d.check(&ctx(T), &target("power.off", "p")).await;
        assert_eq!(fence_verdict(&c), verdict, "exit {code}: {c:?}");
        if let Err(e) = c {
            assert!(
                e.message.contains("ERROR: pretend"),
                "the agent's words are kept: {e}"
            );
        }
    }
}

#[tokio::test]
async fn an_agent_past_its_deadline_is_killed_with_its_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    // `off` hangs, with a child of its own.
    script_agent(
        dir.path(),
        "fence_hang",
        "case $action in off) sleep 300 & sleep 300;; status) exit 0;; esac",
    );
    let d = agent("fence_hang", opts(&[]), None).with_search_path(vec![dir.path().into()]);
    let t = Instant::now();
    let e = d
        .perform(&ctx(Duration::from_millis(1500)), &target("power.off", "p"))
        .await
        .unwrap_err();
    let took = t.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(
        e.state_unknown,
        "an off that may have run leaves the state unknown"
    );
    assert!(
        took < Duration::from_millis(2000),
        "deadline 1.5 s, took {took:?}"
    );
    let pgid: u32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Give the kernel a moment to reap, then no process of that group may be left.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            f.get(2) == Some(&pgid.to_string().as_str()) && f.first() != Some(&"Z")
        })
        .collect();
    assert!(left.is_empty(), "processes left in group {pgid}: {left:?}");
}

#[tokio::test]
async fn a_failed_off_is_answered_by_reading_status() {
    let dir = tempfile::tempdir().unwrap();
    // `off` fails (as an agent might when the plug is already off), but status reads off.
    script_agent(
        dir.path(),
        "fence_grumpy",
        "case $action in off) echo 'ERROR: device busy' >&2; exit 1;; status) if [ -e $D/was_checked ]; then exit 2; fi; touch $D/was_checked; exit 0;; esac",
    );
    let d = agent("fence_grumpy", opts(&[]), None).with_search_path(vec![dir.path().into()]);
    let r = d.perform(&ctx(T), &target("power.off", "p")).await.unwrap();
    assert!(r.holds && r.detail.contains("device busy"), "{}", r.detail);
}

#[tokio::test]
async fn a_missing_agent_is_a_clear_error() {
    let d = agent("fence_not_installed_here", opts(&[]), None);
    let e = d.probe(&ctx(T)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(
        e.message
            .contains("fence_not_installed_here is not installed"),
        "{e}"
    );
}

#[tokio::test]
async fn discovery_lists_plugs_and_binding_checks_flag_an_unlisted_one() {
    let dir = tempfile::tempdir().unwrap();
    script_agent(
        dir.path(),
        "fence_lister",
        "case $action in list) printf 'web1,Web server\\ndb1\\n';; status) exit 0;; esac",
    );
    let d = agent("fence_lister", opts(&[]), None).with_search_path(vec![dir.path().into()]);
    let found = d.discover(&ctx(T)).await.unwrap();
    let plugs: Vec<(&str, &str)> = found
        .iter()
        .map(|f| (f.resource.as_str(), f.description.as_str()))
        .collect();
    assert_eq!(
        plugs,
        [("web1", "plug web1 (Web server)"), ("db1", "plug db1")]
    );
    assert!(found.iter().all(|f| f.capability == "power.off"));
    assert!(
        d.check_binding(&ctx(T), &target("power.off", "db1"))
            .await
            .unwrap()
            .is_empty()
    );
    let problems = d
        .check_binding(&ctx(T), &target("power.off", "db2"))
        .await
        .unwrap();
    assert!(
        problems[0].contains("db2") && problems[0].contains("web1, db1"),
        "{problems:?}"
    );
}
