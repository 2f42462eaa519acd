//! Fidelity of the lab's Nova simulator: one openstacksdk script
//! (`tools/emulators/nova/fidelity.py`, an independent client) drives the real Nova 34 and
//! the simulator, and their answers are compared call by call: the same status codes, the
//! same facts (states, what moved where, error kinds), and every field qfence's driver reads
//! present in both. Other differences (fields only one of them sends) are reported, not
//! failed on. Runs in CI with the real Nova the other tests share.

use std::collections::BTreeMap;

use qfence_lab::TlsIdentity;
use qfence_lab::nova::{self as sim, NovaState};
use serde_json::Value;

use crate::emulators::tools_dir;
use crate::nova_peer::{Cloud, cloud};

struct Run {
    lines: Vec<Value>,
}

async fn script(c: &Cloud, auth_url: &str, cacert: &str, image: &str, hosts: &str) -> Run {
    let out = tokio::process::Command::new(format!("{}/bin/python", c.var("NOVA_VENV")))
        .arg(tools_dir().join("nova/fidelity.py"))
        .args(["--auth-url", auth_url, "--cacert", cacert, "--image", image])
        .args(["--hosts", hosts, "--password", c.var("ADMIN_PASSWORD")])
        .args(["--member-password", c.var("MEMBER_PASSWORD")])
        .env_remove("OS_CLOUD")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run fidelity.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fidelity.py against {auth_url} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        lines: stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect(),
    }
}

#[tokio::test]
async fn nova_fidelity_the_simulator_answers_the_sdk_as_the_real_nova_does() {
    let Some(c) = cloud() else { return };
    c.reset().await;
    let hosts = c.hosts().join(",");

    eprintln!("--- fidelity: the script against the real Nova");
    let real = script(
        c,
        c.var("KEYSTONE_URL"),
        c.var("NOVA_CACERT"),
        c.var("NOVA_IMAGE_ID"),
        &hosts,
    )
    .await;

    eprintln!("--- fidelity: the same script against the simulator");
    let identity = TlsIdentity::loopback().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("sim.pem");
    std::fs::write(&ca, identity.cert_pem()).unwrap();
    let h = sim::start(
        "127.0.0.1:0".parse().unwrap(),
        identity,
        NovaState::new(3, 0),
    )
    .await
    .unwrap();
    let ours = script(
        c,
        &h.keystone_url(),
        ca.to_str().unwrap(),
        sim::state::IMAGE_ID,
        &hosts,
    )
    .await;

    let by_call = |r: &Run| -> BTreeMap<String, Value> {
        r.lines
            .iter()
            .map(|l| (l["call"].as_str().unwrap().to_owned(), l.clone()))
            .collect()
    };
    let (theirs, mine) = (by_call(&real), by_call(&ours));
    let mut critical = Vec::new();
    let mut notes = Vec::new();
    for (call, t) in &theirs {
        let Some(m) = mine.get(call) else {
            critical.push(format!("{call}: the simulator's run has no such call"));
            continue;
        };
        if t["status"] != m["status"] {
            critical.push(format!(
                "{call}: status {} (Nova) vs {} (simulator)",
                t["status"], m["status"]
            ));
        }
        if t["facts"] != m["facts"] {
            critical.push(format!(
                "{call}: facts {} (Nova) vs {} (simulator)",
                t["facts"], m["facts"]
            ));
        }
        for (who, line) in [("Nova", t), ("simulator", m)] {
            if line["missing"].as_array().is_some_and(|a| !a.is_empty()) {
                critical.push(format!(
                    "{call}: {who} lacks fields the driver reads: {}",
                    line["missing"]
                ));
            }
        }
        let keys = |v: &Value| -> Vec<String> {
            v["keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        };
        let (tk, mk) = (keys(t), keys(m));
        let only_nova: Vec<&String> = tk.iter().filter(|k| !mk.contains(k)).collect();
        let only_sim: Vec<&String> = mk.iter().filter(|k| !tk.contains(k)).collect();
        if !only_nova.is_empty() {
            notes.push(format!("{call}: fields only Nova sends: {only_nova:?}"));
        }
        if !only_sim.is_empty() {
            notes.push(format!(
                "{call}: fields only the simulator sends: {only_sim:?}"
            ));
        }
    }
    eprintln!("== Nova simulator fidelity report ({} calls)", theirs.len());
    for n in &notes {
        eprintln!("   note: {n}");
    }
    for d in &critical {
        eprintln!("   DIFF: {d}");
    }
    h.shutdown().await;
    // The script leaves a host forced down with a done record: the next test resets it.
    assert!(theirs.len() >= 40, "the script ran {} calls", theirs.len());
    assert!(
        critical.is_empty(),
        "{} critical differences:\n{}",
        critical.len(),
        critical.join("\n")
    );
}
