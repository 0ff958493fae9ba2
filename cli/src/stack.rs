//! `idemq stack`: the local stack (LocalStack for SQS, moto for DynamoDB,
//! PostgreSQL) started from any project, with the versions this idemq is
//! tested against.
//!
//! The stack's scripts and pinned requirements are compiled into the
//! binary (the same files the repository's `make test` runs). `idemq stack
//! up` writes them under `<dir>/.idemq/stack/` and runs them there, so the
//! venvs, logs, data and the `stack.env` file stay inside the project and a
//! new idemq brings its own pins. Everything listens on 127.0.0.1 only.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The files, at their paths under the stack's root.
const FILES: &[(&str, &str, bool)] = &[
    (
        "scripts/stack.sh",
        include_str!("../stack/scripts/stack.sh"),
        true,
    ),
    (
        "scripts/lib/venv.sh",
        include_str!("../stack/scripts/lib/venv.sh"),
        false,
    ),
    (
        "scripts/lib/supervise.sh",
        include_str!("../stack/scripts/lib/supervise.sh"),
        false,
    ),
    (
        "scripts/moto_dynamodb.py",
        include_str!("../stack/scripts/moto_dynamodb.py"),
        false,
    ),
    (
        "scripts/requirements-localstack.txt",
        include_str!("../stack/scripts/requirements-localstack.txt"),
        false,
    ),
    (
        "scripts/requirements-moto.txt",
        include_str!("../stack/scripts/requirements-moto.txt"),
        false,
    ),
    (
        "scripts/requirements-postgres.txt",
        include_str!("../stack/scripts/requirements-postgres.txt"),
        false,
    ),
    (
        "infra/localstack/docker-compose.yml",
        include_str!("../stack/infra/localstack/docker-compose.yml"),
        false,
    ),
];

#[derive(Debug, clap::Args)]
pub struct StackArgs {
    #[command(subcommand)]
    action: Action,
    /// The project whose stack this is: its files live in <DIR>/.idemq/.
    #[arg(long, global = true, default_value = ".")]
    dir: PathBuf,
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
enum Action {
    /// Start the stack (idempotent; the first start installs it, a minute
    /// or two) and write .idemq/stack/.state/stack.env.
    Up,
    /// Stop what `up` started (idempotent).
    Down,
    /// Show what runs; exit 0 only if everything is healthy.
    Status,
    /// Print the `export` lines for the stack's endpoints and credentials:
    /// `eval "$(idemq stack env)"`.
    Env,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Up => "up",
            Action::Down => "down",
            Action::Status => "status",
            Action::Env => "env",
        }
    }
}

pub fn run(args: StackArgs) -> ExitCode {
    let root = args.dir.join(".idemq").join("stack");
    if let Err(e) = write_files(&root) {
        eprintln!("idemq stack: cannot write {}: {e}", root.display());
        return ExitCode::FAILURE;
    }
    let script = root.join("scripts").join("stack.sh");
    let status = match std::process::Command::new("bash")
        .arg(&script)
        .arg(args.action.name())
        .env("IDEMQ_STACK_COMMAND", "idemq stack")
        .status()
    {
        Ok(status) => status,
        Err(e) => {
            eprintln!("idemq stack: cannot run bash {}: {e}", script.display());
            return ExitCode::FAILURE;
        }
    };
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

/// Writes the stack's files under `root`, replacing any older copy (a file
/// already as this binary has it is left untouched). A `.gitignore` keeps
/// the folder out of the project's repository.
fn write_files(root: &Path) -> std::io::Result<()> {
    for (path, text, executable) in FILES {
        let target = root.join(path);
        if std::fs::read_to_string(&target).is_ok_and(|old| old == *text) {
            continue;
        }
        std::fs::create_dir_all(target.parent().expect("a file in a folder"))?;
        std::fs::File::create(&target)?.write_all(text.as_bytes())?;
        if *executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    let ignore = root.parent().expect("<dir>/.idemq").join(".gitignore");
    if !ignore.exists() {
        std::fs::write(ignore, "*\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_stack_script_sources_or_reads_is_embedded() {
        let script = FILES[0].1;
        for needed in [
            "lib/venv.sh",
            "lib/supervise.sh",
            "moto_dynamodb.py",
            "requirements-localstack.txt",
            "requirements-moto.txt",
            "requirements-postgres.txt",
            "infra/localstack/docker-compose.yml",
        ] {
            assert!(script.contains(needed), "stack.sh no longer names {needed}");
            assert!(
                FILES.iter().any(|(path, _, _)| path.ends_with(needed)),
                "{needed} is not embedded"
            );
        }
    }

    #[test]
    fn writes_the_tree_once_and_replaces_a_changed_file() {
        let dir = std::env::temp_dir().join(format!("idemq-stack-{}", std::process::id()));
        let root = dir.join(".idemq").join("stack");
        write_files(&root).unwrap();
        let script = root.join("scripts/stack.sh");
        assert_eq!(std::fs::read_to_string(&script).unwrap(), FILES[0].1);
        std::fs::write(&script, "old").unwrap();
        write_files(&root).unwrap();
        assert_eq!(std::fs::read_to_string(&script).unwrap(), FILES[0].1);
        assert_eq!(
            std::fs::read_to_string(dir.join(".idemq/.gitignore")).unwrap(),
            "*\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
