//! Starting and stopping the project's emulators (`tools/emulators`) from tests: one starter,
//! [`Starter`], that every test module uses.
//!
//! Each instance gets a run directory and ports of its own, so tests run in parallel (nextest
//! gives each its own process). A start script is given a deadline; once it says it is ready,
//! its TCP ports are checked to accept connections. Any failed attempt (a port taken between
//! our pick and the emulator's bind, a server that did not come up, a script that hung) is
//! stopped and retried on other ports; the scripts' output and the emulators' logs of every
//! attempt are kept for the failure message. [`Emulator`] stops everything it started when
//! dropped.
//!
//! A missing emulator fails the test with a message saying how to install it, unless
//! `QFENCE_SKIP_EMULATORS=1`, in which case the test says it was skipped and returns.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulators")
}

fn skipping() -> bool {
    std::env::var("QFENCE_SKIP_EMULATORS").as_deref() == Ok("1")
}

/// Fails (or, with `QFENCE_SKIP_EMULATORS=1`, skips) because `what` is missing.
pub fn missing(what: &str) -> Option<std::convert::Infallible> {
    if skipping() {
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

/// A free UDP port on 127.0.0.1.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
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
pub fn venv_dir(name: &str) -> PathBuf {
    let mut data =
        std::fs::read(tools_dir().join(format!("requirements/{name}.txt"))).unwrap_or_default();
    let python = std::env::var("QFENCE_EMU_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    data.extend_from_slice(python.as_bytes());
    data.push(b'\n');
    let digest = ring::digest::digest(&ring::digest::SHA256, &data);
    emu_home().join(format!("{name}-{}", &hex::encode(digest.as_ref())[..12]))
}

/// Which kind of port an environment variable of a start script names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
    PrivateTcp,
}

/// How to start one emulator with its start script. Build it, then [`Starter::start`].
#[derive(Debug, Clone)]
pub struct Starter {
    script: &'static str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    ports: Vec<(&'static str, Proto)>,
    venv: Option<&'static str>,
    prefix: &'static str,
    deadline: Duration,
    tries: usize,
}

impl Starter {
    /// `script`: a `tools/emulators/start-*.sh`.
    pub fn new(script: &'static str) -> Self {
        Self {
            script,
            args: Vec::new(),
            env: Vec::new(),
            ports: Vec::new(),
            venv: None,
            prefix: "qemu",
            deadline: Duration::from_secs(90),
            tries: 5,
        }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// The script reads a TCP port from `var`: a free one is picked per attempt, and it must
    /// accept connections once the script says the emulator is ready.
    pub fn tcp_port(mut self, var: &'static str) -> Self {
        self.ports.push((var, Proto::Tcp));
        self
    }

    /// The script reads a UDP port from `var` (picked per attempt; its script checks it).
    pub fn udp_port(mut self, var: &'static str) -> Self {
        self.ports.push((var, Proto::Udp));
        self
    }

    /// A TCP port picked like [`Starter::tcp_port`] but not probed afterwards: a link the
    /// emulator keeps for one peer of its own (ipmi_sim's serial link to its fake host).
    pub fn private_tcp_port(mut self, var: &'static str) -> Self {
        self.ports.push((var, Proto::PrivateTcp));
        self
    }

    /// The emulator runs from `$QFENCE_EMU_HOME`'s venv for `requirements/NAME.txt`: without
    /// it the emulator is missing (a test never installs from the network).
    pub fn venv(mut self, name: &'static str) -> Self {
        self.venv = Some(name);
        self
    }

    /// The run directory's name prefix, under /tmp (short: Unix socket paths are limited).
    pub fn prefix(mut self, p: &'static str) -> Self {
        self.prefix = p;
        self
    }

    /// How long one attempt of the script may take.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }

    /// Starts it. `None` only when the emulator is missing or cannot start and
    /// `QFENCE_SKIP_EMULATORS=1`; otherwise a missing or failing emulator fails the test.
    pub fn start(self) -> Option<Emulator> {
        let script = tools_dir().join(self.script);
        if !script.exists() {
            missing(&format!(
                "{} (this test needs the project's emulator scripts)",
                script.display()
            ))?;
        }
        if let Some(v) = self.venv {
            let venv = venv_dir(v);
            if !venv.join(".qfence-installed").is_file() {
                missing(&format!("{v} (venv {})", venv.display()))?;
            }
        }
        // Made before the script runs: whatever happens next, what it started is stopped.
        let run = tempfile::Builder::new()
            .prefix(self.prefix)
            .tempdir_in("/tmp")
            .unwrap();
        let mut e = Emulator {
            starter: self,
            run,
            ports: BTreeMap::new(),
            vars: BTreeMap::new(),
        };
        match e.launch(false) {
            Ok(()) => Some(e),
            Err(why) if skipping() => {
                eprintln!("SKIPPED (QFENCE_SKIP_EMULATORS=1): {why}");
                None
            }
            Err(why) => panic!(
                "{why}\n(install the emulators with tools/emulators/install.sh as root, or set \
                 QFENCE_SKIP_EMULATORS=1 to skip emulator-backed tests)"
            ),
        }
    }
}

/// A running emulator, in its run directory; stopped (every process its script started)
/// when dropped.
#[derive(Debug)]
pub struct Emulator {
    starter: Starter,
    run: tempfile::TempDir,
    ports: BTreeMap<&'static str, u16>,
    vars: BTreeMap<String, String>,
}

impl Emulator {
    /// The port given to the script in `var`.
    pub fn port(&self, var: &str) -> u16 {
        *self
            .ports
            .get(var)
            .unwrap_or_else(|| panic!("{} was given no port {var}", self.starter.script))
    }

    /// A `KEY=VALUE` the start script printed.
    pub fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{} printed no {key}: {:?}", self.starter.script, self.vars))
    }

    /// Everything the start script printed as `KEY=VALUE`.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    /// Stops it and starts it again in the same run directory (its state kept), on the same
    /// ports if it can, else on others.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.launch(true) {
            panic!("{why}");
        }
    }

    /// Stops every emulator of the run directory (never fails).
    pub fn stop(&self) {
        let _ = Command::new("bash")
            .arg(tools_dir().join("stop.sh"))
            .env("QFENCE_EMU_RUN", self.run.path())
            .stdin(Stdio::null())
            .output();
    }

    /// Up to `tries` attempts, each on fresh ports (the first on the current ones when
    /// `same_ports`), each stopped and cleaned before the next. Returns every attempt's
    /// output and logs when none succeeded.
    fn launch(&mut self, same_ports: bool) -> Result<(), String> {
        let s = self.starter.clone();
        let mut report = String::new();
        for attempt in 1..=s.tries {
            if !(same_ports && attempt == 1) {
                self.pick_ports();
            }
            let started = Instant::now();
            match self.attempt() {
                Ok(vars) => {
                    self.vars = vars;
                    if attempt > 1 {
                        eprintln!(
                            "{} started at attempt {attempt} of {} (earlier attempts:\n{report})",
                            s.script, s.tries
                        );
                    }
                    return Ok(());
                }
                Err(why) => {
                    let _ = writeln!(
                        report,
                        "--- attempt {attempt} of {} (ports {:?}, {:.1?}): {why}\n{}",
                        s.tries,
                        self.ports,
                        started.elapsed(),
                        self.logs()
                    );
                    self.stop();
                }
            }
        }
        Err(format!(
            "could not start {} in {} after {} attempts:\n{report}",
            s.script,
            self.run.path().display(),
            s.tries
        ))
    }

    fn pick_ports(&mut self) {
        let mut taken = Vec::new();
        self.ports.clear();
        for (var, proto) in &self.starter.ports {
            let p = loop {
                let p = match proto {
                    Proto::Tcp | Proto::PrivateTcp => free_port(),
                    Proto::Udp => free_udp_port(),
                };
                if !taken.contains(&p) {
                    break p;
                }
            };
            taken.push(p);
            self.ports.insert(var, p);
        }
    }

    /// One run of the script under the deadline; then its TCP ports must accept connections.
    fn attempt(&self) -> Result<BTreeMap<String, String>, String> {
        let s = &self.starter;
        let out_path = self.run.path().join("start.out");
        let out = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("bash");
        cmd.arg(tools_dir().join(s.script))
            .args(&s.args)
            .env("QFENCE_EMU_RUN", self.run.path())
            .envs(s.env.iter().map(|(k, v)| (k, v)))
            .envs(self.ports.iter().map(|(k, p)| (*k, p.to_string())))
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(|e| e.to_string())?)
            .stderr(out);
        // Its own process group, so a hung script is killed with whatever it spawned.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|e| format!("cannot run bash: {e}"))?;
        let deadline = Instant::now() + s.deadline;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    if let Some(pgid) = i32::try_from(child.id())
                        .ok()
                        .and_then(rustix::process::Pid::from_raw)
                    {
                        let _ = rustix::process::kill_process_group(
                            pgid,
                            rustix::process::Signal::KILL,
                        );
                    }
                    let _ = child.wait();
                    return Err(format!("the script did not finish within {:?}", s.deadline));
                }
            }
        };
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        if !status.success() {
            let why = if status.code() == Some(4) {
                "a port was taken meanwhile (exit 4)".to_owned()
            } else {
                format!("the script failed ({status})")
            };
            return Err(why);
        }
        for (var, proto) in &s.ports {
            if *proto == Proto::Tcp {
                wait_tcp(self.ports[var], deadline)
                    .map_err(|e| format!("{var}={}: {e}", self.ports[var]))?;
            }
        }
        Ok(text
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            })
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    /// The script's output and the last lines of every log in the run directory.
    fn logs(&self) -> String {
        let mut out = String::new();
        let mut files = vec![self.run.path().join("start.out")];
        for dir in [self.run.path().to_owned(), self.run.path().join("pg")] {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                let mut logs: Vec<PathBuf> = rd
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect();
                logs.sort();
                files.extend(logs);
            }
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            let _ = writeln!(out, "[{}]\n{}", f.display(), tail.join("\n"));
        }
        out
    }
}

/// Waits until 127.0.0.1:`port` accepts a TCP connection, or `deadline`.
fn wait_tcp(port: u16, deadline: Instant) -> Result<(), String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("nothing accepts connections ({e})"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One sushy-tools Redfish emulator (HTTPS, basic auth admin/password).
#[derive(Debug)]
pub struct Sushy {
    emu: Emulator,
    pub port: u16,
}

pub const NODE1_UUID: &str = "11111111-1111-4111-8111-111111111111";
pub const NODE2_UUID: &str = "22222222-2222-4222-8222-222222222222";

impl Sushy {
    /// Starts an instance. `delay`: `None` keeps sushy's own 1–11 s power changes; `Some("0")`
    /// applies them on the next read (REDFISH_POWER_DELAY).
    pub fn start(delay: Option<&str>) -> Option<Self> {
        let mut starter = Starter::new("start-redfish-sushy.sh")
            .prefix("qfence-sushy-")
            .venv("sushy")
            .tcp_port("REDFISH_PORT");
        if let Some(d) = delay {
            starter = starter.env("REDFISH_POWER_DELAY", d);
        }
        let emu = starter.start()?;
        Some(Sushy {
            port: emu.port("REDFISH_PORT"),
            emu,
        })
    }

    /// Stops it, makes it forget its certificate, and starts it again (on the same port if it
    /// can): the certificate is swapped under whoever pinned the old one.
    pub fn swap_certificate(&mut self) {
        self.emu.stop();
        for f in ["ca.pem", "ca.key", "cert.pem", "key.pem"] {
            let _ = std::fs::remove_file(self.emu.run_dir().join("sushy").join(f));
        }
        self.emu.restart();
        self.port = self.emu.port("REDFISH_PORT");
    }

    pub fn endpoint(&self) -> url::Url {
        url::Url::parse(&format!("https://127.0.0.1:{}", self.port)).unwrap()
    }

    pub fn ca_file(&self) -> String {
        self.emu
            .run_dir()
            .join("sushy/ca.pem")
            .display()
            .to_string()
    }

    pub fn cert_fingerprint(&self) -> String {
        let pem = std::fs::read(self.emu.run_dir().join("sushy/cert.pem")).unwrap();
        let der = rustls_pemfile::certs(&mut pem.as_slice())
            .next()
            .unwrap()
            .unwrap();
        qfence_controllers::tls::fingerprint(&der)
    }
}
