//! Starting and stopping the project's emulators (`tools/emulators`) from tests.
//!
//! Each test starts its own instance on its own port and run directory, so tests run in
//! parallel (nextest gives each its own process), and a guard stops it when the test ends.
//! A missing emulator fails the test with a message saying how to install it, unless
//! `QFENCE_SKIP_EMULATORS=1`, in which case the test says it was skipped and returns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators")
}

/// Fails (or, with `QFENCE_SKIP_EMULATORS=1`, skips) because `what` is missing.
pub fn missing(what: &str) -> Option<std::convert::Infallible> {
    if std::env::var("QFENCE_SKIP_EMULATORS").as_deref() == Ok("1") {
        eprintln!("SKIPPED (QFENCE_SKIP_EMULATORS=1): {what} is not installed");
        return None;
    }
    panic!(
        "{what} is not installed on this machine. Install the emulators with \
         tools/emulators/install.sh (as root), or set QFENCE_SKIP_EMULATORS=1 to skip \
         emulator-backed tests explicitly."
    );
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether a program is installed (fence agents live in /usr/sbin).
pub fn have_program(name: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| Path::new(d).join(name).is_file())
}

fn emu_home() -> PathBuf {
    std::env::var_os("QFENCE_EMU_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/qfence-emu"))
}

/// The venv the scripts use for `requirements/NAME.txt`: `$QFENCE_EMU_HOME/NAME-<hash>`, the
/// hash being of the file and the interpreter's path, as `_lib.sh`'s `venv_dir` makes it.
/// Checked here so that a test never makes the start script install from the network.
fn venv_dir(name: &str) -> PathBuf {
    let mut data =
        std::fs::read(tools_dir().join(format!("requirements/{name}.txt"))).unwrap_or_default();
    let python = std::env::var("QFENCE_EMU_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    data.extend_from_slice(python.as_bytes());
    data.push(b'\n');
    let digest = ring::digest::digest(&ring::digest::SHA256, &data);
    emu_home().join(format!("{name}-{}", &hex::encode(digest.as_ref())[..12]))
}

/// One sushy-tools Redfish emulator (HTTPS, basic auth admin/password).
#[derive(Debug)]
pub struct Sushy {
    pub run: tempfile::TempDir,
    pub port: u16,
    pub delay: Option<String>,
    pub env: BTreeMap<String, String>,
}

pub const NODE1_UUID: &str = "11111111-1111-4111-8111-111111111111";
pub const NODE2_UUID: &str = "22222222-2222-4222-8222-222222222222";

impl Sushy {
    /// Starts an instance. `delay`: `None` keeps sushy's own 1–11 s power changes; `Some("0")`
    /// applies them on the next read (REDFISH_POWER_DELAY).
    pub fn start(delay: Option<&str>) -> Option<Self> {
        let venv = venv_dir("sushy");
        if !venv.join(".qfence-installed").is_file() {
            missing(&format!("sushy-tools (venv {})", venv.display()))?;
        }
        let run = tempfile::Builder::new()
            .prefix("qfence-sushy-")
            .tempdir()
            .unwrap();
        let mut s = Sushy {
            run,
            port: free_port(),
            delay: delay.map(str::to_owned),
            env: BTreeMap::new(),
        };
        s.launch();
        Some(s)
    }

    fn launch(&mut self) {
        for _ in 0..5 {
            let out = self.try_launch();
            // 4: the port was taken meanwhile; take another.
            if out.status.code() == Some(4) {
                self.port = free_port();
                continue;
            }
            assert!(
                out.status.success(),
                "start-redfish-sushy.sh failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            self.env = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            return;
        }
        panic!("start-redfish-sushy.sh: no free port after 5 tries");
    }

    fn try_launch(&self) -> std::process::Output {
        let mut cmd = Command::new(tools_dir().join("start-redfish-sushy.sh"));
        cmd.env("QFENCE_EMU_RUN", self.run.path())
            .env("REDFISH_PORT", self.port.to_string());
        if let Some(d) = &self.delay {
            cmd.env("REDFISH_POWER_DELAY", d);
        }
        cmd.output().expect("run start-redfish-sushy.sh")
    }

    /// Stops it, makes it forget its certificate, and starts it again on the same port: the
    /// certificate is swapped under whoever pinned the old one.
    pub fn swap_certificate(&mut self) {
        self.stop();
        for f in ["ca.pem", "ca.key", "cert.pem", "key.pem"] {
            let _ = std::fs::remove_file(self.run.path().join("sushy").join(f));
        }
        self.launch();
    }

    pub fn endpoint(&self) -> url::Url {
        url::Url::parse(&format!("https://127.0.0.1:{}", self.port)).unwrap()
    }

    pub fn ca_file(&self) -> String {
        self.run.path().join("sushy/ca.pem").display().to_string()
    }

    pub fn cert_fingerprint(&self) -> String {
        let pem = std::fs::read(self.run.path().join("sushy/cert.pem")).unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_slice())
            .next()
            .unwrap()
            .unwrap();
        qfence_controllers::tls::fingerprint(&der)
    }

    fn stop(&self) {
        let _ = Command::new(tools_dir().join("stop.sh"))
            .arg("redfish-sushy")
            .env("QFENCE_EMU_RUN", self.run.path())
            .output();
    }
}

impl Drop for Sushy {
    fn drop(&mut self) {
        self.stop();
    }
}
