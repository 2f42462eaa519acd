//! The browser test harness: Debian's `chromedriver` and headless `chromium`, driven over
//! WebDriver by `thirtyfour`, against a console served on loopback.
//!
//! One [`Browser`] is one chromedriver process (its own port, its own process group, so
//! dropping it takes chromium down too) and one WebDriver session with a fresh profile.
//! Screenshots go to `target/console-screenshots/NAME.png` (or `$CARGO_TARGET_DIR/...`), so a
//! run leaves them for people to look at. The `wait_*` helpers poll, because the console
//! updates itself (server-sent events, redirects) and a test must not race it.
//!
//! Other test binaries can use this file with `#[path = ".../harness.rs"] mod harness;`.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use thirtyfour::prelude::*;

pub use thirtyfour::By;
pub use thirtyfour::WebElement;

/// How long a page or an element may take before a wait fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// The directory screenshots are written to (created on first use).
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("console-screenshots")
}

/// The first of `candidates` that exists, or the name found on `PATH`.
fn find_exe(env: &str, candidates: &[&str]) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Ok(PathBuf::from(p));
    }
    for c in candidates {
        let p = Path::new(c);
        if p.is_absolute() && p.exists() {
            return Ok(p.to_path_buf());
        }
    }
    for c in candidates {
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let p = dir.join(c);
                if p.exists() {
                    return Ok(p);
                }
            }
        }
    }
    bail!(
        "none of {candidates:?} found (set {env}); the browser tests need Debian's chromium and \
         chromium-driver, which tools/emulators/install.sh installs"
    )
}

/// A launcher script for chromium that keeps it from starving the machine: run as root,
/// chromium raises its own threads' priority (negative nice), which on a small shared CI
/// machine stalls everything else, the tests' own servers included. The launcher drops
/// `CAP_SYS_NICE` (with util-linux's `setpriv`, when present) and starts it at nice 10.
fn polite_launcher(dir: &Path, chromium: &Path) -> Result<PathBuf> {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .find(|p| Path::new(p).exists())
        .map(|p| format!("{p} --inh-caps -sys_nice --bounding-set -sys_nice -- "))
        .unwrap_or_default();
    let script = format!(
        "#!/bin/sh\nexec nice -n 10 {setpriv}{} \"$@\"\n",
        chromium.display()
    );
    let path = dir.join("chromium-launcher");
    std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(path)
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A chromedriver process; killed with its whole process group (chromium included) on drop.
struct Driver {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Not kill(1): procps-ng 4.0.2 reads `kill -KILL -PGID` as kill(-1), every process
        // on the machine; this line once took a whole CI run down with it.
        if let Some(pgid) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless chromium under WebDriver.
pub struct Browser {
    pub driver: WebDriver,
    /// The console's base URL, `http(s)://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
    /// The test's name: screenshots are `NAME-STEP.png`.
    pub name: String,
    _chromedriver: Driver,
}

impl Browser {
    /// Starts chromedriver and a headless chromium with a fresh profile, for the console at
    /// `base`. `name` prefixes this test's screenshots.
    pub async fn start(base: &str, name: &str) -> Result<Self> {
        // reqwest (inside thirtyfour) is built without a default crypto provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let chromedriver = find_exe("CHROMEDRIVER", &["/usr/bin/chromedriver", "chromedriver"])?;
        let chromium = find_exe(
            "CHROMIUM",
            &["/usr/bin/chromium", "chromium", "chromium-browser"],
        )?;
        let port = free_port()?;
        let profile = tempfile::tempdir()?;
        // Its own session (util-linux `setsid`, which execs in place: the pid is
        // chromedriver's), so chromedriver and chromium have no controlling terminal and form
        // one process group that Drop kills; without `setsid`, a process group of its own.
        let mut cmd = if Path::new("/usr/bin/setsid").exists() {
            let mut c = Command::new("/usr/bin/setsid");
            c.arg(&chromedriver);
            c
        } else {
            let mut c = Command::new(&chromedriver);
            #[cfg(unix)]
            {
                use std::os::unix::process::CommandExt;
                c.process_group(0);
            }
            c
        };
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        let guard = Driver {
            child,
            _profile: profile,
        };
        let url = format!("http://127.0.0.1:{port}");
        wait_for_port(([127, 0, 0, 1], port).into(), Duration::from_secs(20)).await?;

        let mut caps = DesiredCapabilities::chrome();
        let binary = polite_launcher(guard._profile.path(), &chromium)?;
        caps.set_binary(&binary.display().to_string())?;
        for arg in [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--no-default-browser-check",
            // The test servers present self-signed certificates (the daemon serves HTTPS only).
            "--ignore-certificate-errors",
            "--window-size=1360,900",
            "--lang=en-GB",
        ] {
            caps.add_arg(arg)?;
        }
        caps.add_arg(&format!(
            "--user-data-dir={}",
            guard._profile.path().display()
        ))?;
        let driver = tokio::time::timeout(Duration::from_secs(60), WebDriver::new(&url, caps))
            .await
            .context("chromium did not start within 60 s")?
            .context("starting a chromium session")?;
        Ok(Self {
            driver,
            base: base.trim_end_matches('/').to_owned(),
            name: name.to_owned(),
            _chromedriver: guard,
        })
    }

    /// Ends the session (chromium exits), then chromedriver.
    pub async fn quit(self) -> Result<()> {
        let Browser {
            driver,
            _chromedriver,
            ..
        } = self;
        driver.quit().await?;
        drop(_chromedriver);
        Ok(())
    }

    /// Opens `path` (from the console's root).
    pub async fn open(&self, path: &str) -> Result<()> {
        self.driver
            .goto(format!("{}{}", self.base, path))
            .await
            .with_context(|| format!("opening {path}"))?;
        Ok(())
    }

    /// The current path and query.
    pub async fn path(&self) -> Result<String> {
        let u = self.driver.current_url().await?;
        Ok(match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_owned(),
        })
    }

    /// Signs in on the login page with `token` and waits to land on `/` (or where `next` was).
    pub async fn sign_in(&self, token: &str) -> Result<()> {
        self.open("/login").await?;
        let field = self.wait_for("#token").await?;
        field.send_keys(token).await?;
        self.driver
            .find(By::Css("form[action='/login'] button[type=submit]"))
            .await?
            .click()
            .await?;
        self.wait_until("signed in", || async {
            Ok(!self.path().await?.starts_with("/login"))
        })
        .await
    }

    /// Saves a PNG of the viewport as `NAME-STEP.png` and returns its path.
    pub async fn screenshot(&self, step: &str) -> Result<PathBuf> {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}-{step}.png", self.name));
        let png = self.driver.screenshot_as_png().await?;
        anyhow::ensure!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("    screenshot {}", path.display());
        Ok(path)
    }

    /// Saves a PNG of the element `css` only (scrolled into view) as `NAME-STEP.png`.
    pub async fn screenshot_of(&self, css: &str, step: &str) -> Result<PathBuf> {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}-{step}.png", self.name));
        let e = self.wait_for(css).await?;
        e.scroll_into_view().await?;
        let png = e.screenshot_as_png().await?;
        anyhow::ensure!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("    screenshot {}", path.display());
        Ok(path)
    }

    /// The element `css`, once it is present.
    pub async fn wait_for(&self, css: &str) -> Result<WebElement> {
        let start = Instant::now();
        loop {
            if let Ok(e) = self.driver.find(By::Css(css)).await {
                return Ok(e);
            }
            if start.elapsed() > WAIT {
                bail!(
                    "{css} did not appear within {WAIT:?} on {}",
                    self.path().await.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the text of `css` contains `text` (within `limit`), and returns the text.
    pub async fn wait_for_text_within(
        &self,
        css: &str,
        text: &str,
        limit: Duration,
    ) -> Result<String> {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            if let Ok(e) = self.driver.find(By::Css(css)).await
                && let Ok(t) = e.text().await
            {
                if t.contains(text) {
                    return Ok(t);
                }
                last = t;
            }
            if start.elapsed() > limit {
                bail!("{css} did not show {text:?} within {limit:?}; it showed {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// [`Self::wait_for_text_within`] with [`WAIT`].
    pub async fn wait_for_text(&self, css: &str, text: &str) -> Result<String> {
        self.wait_for_text_within(css, text, WAIT).await
    }

    /// Polls `f` until it answers true (errors count as not yet).
    pub async fn wait_until<F, Fut>(&self, what: &str, mut f: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        let start = Instant::now();
        loop {
            if let Ok(true) = f().await {
                return Ok(());
            }
            if start.elapsed() > WAIT {
                bail!("{what}: not within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types `text` into the field `css` after clearing it.
    pub async fn fill(&self, css: &str, text: &str) -> Result<()> {
        let e = self.wait_for(css).await?;
        e.clear().await?;
        e.send_keys(text).await?;
        Ok(())
    }

    /// Clicks `css`.
    pub async fn click(&self, css: &str) -> Result<()> {
        self.wait_for(css).await?.click().await?;
        Ok(())
    }

    /// Clicks `css`, a button that submits its form, and waits until the browser shows the
    /// page the server answered with. Until then a lookup finds the old page's elements
    /// (hidden fields included), which go stale under the reader once the new page arrives.
    pub async fn submit(&self, css: &str) -> Result<()> {
        self.driver
            .execute("window.__qfence_old_page = true;", Vec::new())
            .await?;
        self.click(css).await?;
        self.wait_until(&format!("the page answering {css}"), || async {
            let v = self
                .driver
                .execute(
                    "return document.readyState === 'complete' && !window.__qfence_old_page;",
                    Vec::new(),
                )
                .await?;
            Ok(v.json().as_bool() == Some(true))
        })
        .await
    }

    /// The text of the whole page body.
    pub async fn body_text(&self) -> Result<String> {
        Ok(self.driver.find(By::Tag("body")).await?.text().await?)
    }
}

async fn wait_for_port(addr: SocketAddr, limit: Duration) -> Result<()> {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if start.elapsed() > limit {
            bail!("chromedriver did not listen on {addr} within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A console served on loopback (plain HTTP) from a router, for as long as it lives.
#[derive(Debug)]
pub struct Served {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serves `app` on `127.0.0.1:0`.
pub async fn serve(app: axum::Router) -> Result<Served> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await;
    });
    Ok(Served {
        base: format!("http://{addr}"),
        stop: Some(tx),
    })
}

// ---- what both browser test binaries share ----

/// The tokens every browser story signs in with.
pub const VIEWER: &str = "viewer-token-1";
pub const OPERATOR: &str = "operator-token-2";
pub const ADMIN: &str = "admin-token-3";

/// The token store holding [`VIEWER`], [`OPERATOR`] and [`ADMIN`].
pub fn tokens() -> qfence_runtime::TokenStore {
    use qfence_runtime::Access;
    qfence_runtime::TokenStore::default()
        .with_token(Access::Viewer, "grafana", VIEWER)
        .with_token(Access::Operator, "oncall", OPERATOR)
        .with_token(Access::Admin, "alice", ADMIN)
}

/// Marks a story's step in the test's output.
pub fn phase(what: &str) {
    eprintln!("--- {what}");
}

/// The console (and API) over the lab running for real (`qfence_server::testing::LabRuntime`:
/// the lab's simulators, a one-voter cluster, the engine's loop), served on loopback.
pub async fn lab_console() -> Result<(Served, qfence_server::testing::LabRuntime)> {
    let lab = qfence_server::testing::LabRuntime::start().await?;
    let app = qfence_server::router(
        lab.backend(),
        tokens(),
        qfence_runtime::Metrics::new(),
        &qfence_server::ApiConfig::default(),
    );
    Ok((serve(app).await?, lab))
}
