//! Man pages and shell completions generated from a binary's clap definitions, for the Debian
//! package: `picketd generate-docs --out-dir DIR` and `picketctl generate-docs --out-dir DIR`
//! (scripts/package runs them before `cargo deb`). `generate-docs` is recognised before the
//! binary's own parser runs, so it is in none of the help texts, pages or completions it writes.
//!
//! Layout under the output directory: `man/<name>.1` and one `man/<name>-<sub>.1` per visible
//! subcommand (clap_mangen), `completions/<name>.bash`, `completions/_<name>` (zsh) and
//! `completions/<name>.fish` (clap_complete).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use clap_complete::Shell;

/// The shells completions are written for.
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// Writes the man pages and completions of `command` under `out_dir`; answers the files
/// written, sorted.
pub fn write(mut command: clap::Command, out_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let name = command.get_name().to_owned();
    let man_dir = out_dir.join("man");
    let completions_dir = out_dir.join("completions");
    std::fs::create_dir_all(&man_dir)?;
    std::fs::create_dir_all(&completions_dir)?;
    clap_mangen::generate_to(command.clone(), &man_dir)?;
    let mut written = Vec::new();
    for entry in std::fs::read_dir(&man_dir)? {
        let path = entry?.path();
        let is_ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == format!("{name}.1") || n.starts_with(&format!("{name}-")));
        if is_ours {
            written.push(path);
        }
    }
    for shell in SHELLS {
        written.push(clap_complete::generate_to(
            shell,
            &mut command,
            &name,
            &completions_dir,
        )?);
    }
    written.sort();
    Ok(written)
}

/// The command line after `<binary> generate-docs`.
#[derive(Debug, Parser)]
#[command(about = "Write the man pages and shell completions of this binary")]
struct GenerateDocs {
    /// Where to write man/ and completions/.
    #[arg(long)]
    out_dir: PathBuf,
}

/// When the process was started as `<binary> generate-docs --out-dir DIR`, writes the docs of
/// `command()` and answers the exit status (0, or 1 with the error on stderr; bad arguments exit
/// 2 through clap). Otherwise `None`: the binary parses its own command line.
pub fn run_if_asked(command: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != "generate-docs" {
        return None;
    }
    let command = command();
    let name = command.get_name().to_owned();
    let parsed = GenerateDocs::parse_from(
        std::iter::once(OsString::from(format!("{name} generate-docs"))).chain(args),
    );
    match write(command, &parsed.out_dir) {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            Some(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!(
                "{name}: generate-docs {}: {error}",
                parsed.out_dir.display()
            );
            Some(ExitCode::FAILURE)
        }
    }
}
