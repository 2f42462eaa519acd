//! The Debian package, built and installed as an operator would: `scripts/package` builds it
//! from this test's binary with cargo-deb, `dpkg -i` installs it into a copy of a Debian 12
//! root made with debootstrap (`tools/emulators/debian-root.sh`, cached per machine), the
//! files are where Debian keeps them, the `qfence` system user exists, the example
//! configuration checks clean with the installed binary, and `systemd-analyze verify` finds
//! nothing to say about the unit (its man pages resolve too).

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

const QFENCE: &str = env!("CARGO_BIN_EXE_qfence");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn phase(what: &str) {
    eprintln!("--- {what}");
}

/// Runs `cmd`; its stdout and stderr together, failing on a non-zero exit.
fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {text}",
        out.status
    );
    Ok(text)
}

fn chroot(root: &Path, args: &[&str]) -> Result<String> {
    run(Command::new("chroot")
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
}

/// The cached Debian root, or a failure saying how to make it.
fn debian_root() -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(repo("tools/emulators/debian-root.sh"))
        .arg("--check")
        .output()?;
    if !out.status.success() {
        bail!(
            "no Debian root for the package test: run tools/emulators/install.sh (as root; it \
             runs tools/emulators/debian-root.sh, about two minutes once per machine)"
        );
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

#[test]
fn the_debian_package_installs_into_a_debian_root_and_its_unit_verifies() -> Result<()> {
    let cached = debian_root()?;
    let tmp = tempfile::tempdir()?;

    phase("scripts/package builds the .deb from this binary with cargo-deb");
    let t = Instant::now();
    let out = tmp.path().join("deb");
    run(Command::new("bash").arg(repo("scripts/package")).args([
        "--binary",
        QFENCE,
        "--out",
        out.to_str().context("UTF-8")?,
        "--fast",
    ]))?;
    let deb = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("a .deb")?;
    eprintln!(
        "   {} ({:.1} MB) in {:.1} s",
        deb.display(),
        std::fs::metadata(&deb)?.len() as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let info = run(Command::new("dpkg-deb").arg("--info").arg(&deb))?;
    for want in ["Package: qfence", "Depends: adduser", "Section: admin"] {
        ensure!(info.contains(want), "{want:?} in the control file:\n{info}");
    }

    phase("dpkg -i into a copy of the Debian 12 root");
    let t = Instant::now();
    let root = tmp.path().join("root");
    run(Command::new("cp").arg("-a").arg(&cached).arg(&root))?;
    std::fs::copy(&deb, root.join("tmp/qfence.deb"))?;
    eprintln!("   root copied in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let installed = chroot(&root, &["dpkg", "-i", "/tmp/qfence.deb"])?;
    eprintln!("   installed in {:.1} s", t.elapsed().as_secs_f64());
    ensure!(
        !installed.to_lowercase().contains("warning"),
        "dpkg -i warns: {installed}"
    );

    phase("the files are where Debian keeps them");
    for f in [
        "usr/bin/qfence",
        "usr/lib/systemd/system/qfence.service",
        "etc/qfence/qfence.example.yaml",
        "etc/qfence/tokens",
        "etc/default/qfence",
        "usr/share/man/man1/qfence.1.gz",
        "usr/share/man/man1/qfence-serve.1.gz",
        "usr/share/man/man1/qfence-plan-switchover.1.gz",
        "usr/share/bash-completion/completions/qfence",
        "usr/share/zsh/vendor-completions/_qfence",
        "usr/share/fish/vendor_completions.d/qfence.fish",
        "usr/share/qfence/prometheus/qfence.rules.yml",
        "usr/share/qfence/grafana/qfence.json",
    ] {
        ensure!(root.join(f).is_file(), "/{f} is installed");
    }
    let status = chroot(
        &root,
        &["dpkg-query", "-W", "-f=${Status} ${Conffiles}\n", "qfence"],
    )?;
    ensure!(status.starts_with("install ok installed"), "{status}");
    for conffile in [
        "/etc/qfence/tokens",
        "/etc/default/qfence",
        "/etc/qfence/qfence.example.yaml",
    ] {
        ensure!(
            status.contains(conffile),
            "{conffile} is a conffile: {status}"
        );
    }
    let bash = std::fs::read_to_string(root.join("usr/share/bash-completion/completions/qfence"))?;
    ensure!(
        bash.contains("switchover") && bash.contains("--log-format"),
        "bash completes subcommands and flags"
    );

    phase("the qfence system user, its state directory, a root-only credentials directory");
    let user = chroot(&root, &["getent", "passwd", "qfence"])?;
    let fields: Vec<&str> = user.trim().split(':').collect();
    let uid: u32 = fields.get(2).context("uid")?.parse()?;
    ensure!(uid < 1000, "a system user: {user}");
    ensure!(fields.get(5) == Some(&"/var/lib/qfence"), "home: {user}");
    ensure!(
        fields.get(6).is_some_and(|s| s.ends_with("nologin")),
        "no login: {user}"
    );
    let state = std::fs::metadata(root.join("var/lib/qfence"))?;
    ensure!(
        state.uid() == uid && state.mode() & 0o777 == 0o750,
        "/var/lib/qfence: uid {} mode {:o}",
        state.uid(),
        state.mode() & 0o777
    );
    let creds = std::fs::metadata(root.join("etc/qfence/credentials"))?;
    ensure!(
        creds.uid() == 0 && creds.permissions().mode() & 0o777 == 0o700,
        "/etc/qfence/credentials is root's, mode 0700"
    );
    let tokens = std::fs::metadata(root.join("etc/qfence/tokens"))?;
    ensure!(
        tokens.permissions().mode() & 0o777 == 0o640,
        "tokens mode 0640"
    );

    phase("the installed binary checks the example configuration clean");
    let check = chroot(
        &root,
        &[
            "qfence",
            "config",
            "check",
            "/etc/qfence/qfence.example.yaml",
        ],
    )?;
    ensure!(check.contains("valid"), "{check}");
    chroot(&root, &["qfence", "completions", "zsh"])?;

    phase("systemd-analyze verify has nothing to say about the unit");
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/qfence.service"))?;
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "LoadCredential=qfence:/etc/qfence/credentials",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "User=qfence",
    ] {
        ensure!(
            unit.lines().any(|l| l.starts_with(line)),
            "{line} in the unit"
        );
    }
    let verify = chroot(
        &root,
        &[
            "systemd-analyze",
            "verify",
            "/usr/lib/systemd/system/qfence.service",
        ],
    )?;
    ensure!(verify.trim().is_empty(), "systemd-analyze verify: {verify}");
    // And it would say so: a misspelt option is reported.
    std::fs::write(
        root.join("tmp/typo.service"),
        unit.replace("ProtectSystem=", "ProtectSytem="),
    )?;
    let typo = chroot(&root, &["systemd-analyze", "verify", "/tmp/typo.service"])?;
    ensure!(
        typo.contains("Unknown key"),
        "a misspelt key is reported: {typo}"
    );
    let security = chroot(
        &root,
        &[
            "systemd-analyze",
            "security",
            "--offline=yes",
            "/usr/lib/systemd/system/qfence.service",
        ],
    );
    if let Some(line) = security
        .iter()
        .flat_map(|s| s.lines())
        .find(|l| l.contains("Overall exposure"))
    {
        eprintln!("   systemd-analyze security: {}", line.trim());
    }
    Ok(())
}
