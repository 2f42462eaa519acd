//! Shell completions and man pages, generated from the CLI's own clap definitions, so they
//! never drift from what the binary accepts. `qfence completions SHELL` prints one script;
//! the packaging step runs `qfence generate-assets --out DIR` for all of them.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

/// `qfence completions`
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `qfence generate-assets`
#[derive(Debug, Args)]
pub struct AssetsArgs {
    /// Where to write `man/*.1` and `completions/` (created).
    #[arg(long)]
    pub out: PathBuf,
}

/// Prints the completion script of `a.shell` on stdout.
pub fn completions(a: CompletionsArgs, mut cli: clap::Command) -> anyhow::Result<ExitCode> {
    // Into a buffer first: clap_complete panics on a write error (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cli, "qfence", &mut script);
    match std::io::Write::write_all(&mut std::io::stdout(), &script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// The file name each shell looks its completions up by, as Debian installs them.
fn file_name(shell: Shell) -> &'static str {
    match shell {
        Shell::Zsh => "_qfence",
        Shell::Fish => "qfence.fish",
        Shell::PowerShell => "qfence.ps1",
        Shell::Elvish => "qfence.elv",
        _ => "qfence",
    }
}

/// Writes one man page per command and subcommand (`qfence.1`, `qfence-serve.1`,
/// `qfence-plan-switchover.1`, ...) into `OUT/man`, and the bash, zsh and fish completion
/// scripts into `OUT/completions`.
pub fn assets(a: AssetsArgs, cli: clap::Command) -> anyhow::Result<ExitCode> {
    let man = a.out.join("man");
    let completions = a.out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    clap_mangen::generate_to(cli.clone(), &man)
        .with_context(|| format!("writing the man pages into {}", man.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = completions.join(file_name(shell));
        let mut file =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        clap_complete::generate(shell, &mut cli.clone(), "qfence", &mut file);
    }
    let pages = std::fs::read_dir(&man)?.count();
    println!(
        "Wrote {pages} man pages into {} and the bash, zsh and fish completions into {}",
        man.display(),
        completions.display()
    );
    Ok(ExitCode::SUCCESS)
}
