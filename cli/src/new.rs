//! `idemq new`: a function crate of the user's own, ready to unit-test,
//! run against the local stack and deploy.
//!
//! The files come from cli/templates/function/ (compiled into the binary;
//! its deploy/ links to idemq's own infra/sam/idemq.yaml and Terraform
//! module, so the copies a user gets are the ones `make test` checks);
//! `{{name}}`, `{{idemq}}` and `{{idemq_testing}}` are filled in. The
//! crate depends on this idemq's version (`--idemq-path` for a checkout).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A template file written at `path`, from the file of that name (or
/// `source`) under cli/templates/function/.
macro_rules! template {
    ($path:literal) => {
        template!($path, $path)
    };
    ($path:literal, $source:literal) => {
        (
            $path,
            include_str!(concat!("../templates/function/", $source)),
        )
    };
}

/// A file of idemq's Terraform module.
macro_rules! tf {
    ($name:literal) => {
        (
            concat!("deploy/terraform/modules/idemq/", $name),
            include_str!(concat!(
                "../templates/function/deploy/terraform/modules/idemq/",
                $name
            )),
        )
    };
}

/// The template's files: the path written, the text.
const FILES: &[(&str, &str)] = &[
    template!("Cargo.toml", "Cargo.toml.tmpl"),
    template!("src/main.rs"),
    template!("jobs.jsonl"),
    template!("event.json"),
    template!("README.md"),
    template!(".gitignore", "gitignore"),
    // SAM: the function and its own table, with idemq's nested template
    // (infra/sam/idemq.yaml, verbatim).
    template!("deploy/sam/template.yaml"),
    template!("deploy/sam/idemq.yaml"),
    // Terraform: the root module, with idemq's module
    // (infra/terraform/modules/idemq, verbatim).
    template!("deploy/terraform/main.tf"),
    tf!("alarms.tf"),
    tf!("function.tf"),
    tf!("main.tf"),
    tf!("operator.tf"),
    tf!("outputs.tf"),
    tf!("variables.tf"),
    tf!("versions.tf"),
];

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The directory to create (it must not exist, or be empty).
    path: PathBuf,
    /// The crate's name (default: the directory's name).
    #[arg(long)]
    name: Option<String>,
    /// Depend on the idemq crate at this path (a checkout) instead of the
    /// published version.
    #[arg(long)]
    idemq_path: Option<PathBuf>,
    /// Print {"path", "name", "files"} on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: NewArgs) -> ExitCode {
    match create(&args) {
        Ok((name, written)) => {
            if args.json {
                let files: Vec<&str> = written.iter().map(|(p, _)| *p).collect();
                println!(
                    "{}",
                    serde_json::json!({"path": args.path, "name": name, "files": files})
                );
            }
            for (path, _) in &written {
                eprintln!("created {}", args.path.join(path).display());
            }
            eprintln!(
                "\n{name}: an SQS function whose every order counts once. Next (its README says more):\n  \
                 cd {dir}\n  cargo test                   # the handler through the real batch code, in memory\n  \
                 idemq stack up               # SQS, DynamoDB and PostgreSQL on 127.0.0.1",
                dir = args.path.display()
            );
            ExitCode::SUCCESS
        }
        Err(Refusal::Usage(msg)) => crate::usage_error(&msg),
        Err(Refusal::Io(msg)) => {
            eprintln!("idemq new: {msg}");
            ExitCode::FAILURE
        }
    }
}

enum Refusal {
    Usage(String),
    Io(String),
}

type Written = Vec<(&'static str, String)>;

fn create(args: &NewArgs) -> Result<(String, Written), Refusal> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                Refusal::Usage(format!("{} has no name: pass --name", args.path.display()))
            })?,
    };
    check_name(&name).map_err(Refusal::Usage)?;
    if std::fs::read_dir(&args.path).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Refusal::Usage(format!(
            "{} exists and is not empty: pick a new directory",
            args.path.display()
        )));
    }
    let (idemq, idemq_testing) = dependency(args.idemq_path.as_deref()).map_err(Refusal::Usage)?;
    let files: Written = FILES
        .iter()
        .map(|(path, text)| {
            let text = text
                .replace("{{name}}", &name)
                .replace("{{idemq_testing}}", &idemq_testing)
                .replace("{{idemq}}", &idemq);
            (*path, text)
        })
        .collect();
    for (path, text) in &files {
        let target = args.path.join(path);
        let dir = target.parent().expect("a file in a folder");
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&target, text))
            .map_err(|e| Refusal::Io(format!("cannot write {}: {e}", target.display())))?;
    }
    Ok((name, files))
}

/// A package name Cargo accepts: ASCII letters, digits, `-` and `_`, not
/// starting with a digit, at most 64 characters.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a crate name (ASCII letters, digits, - and _, not starting with a digit): pass --name"
        ))
    }
}

/// The `idemq` dependency lines, without and with the test kit: this
/// idemq's version, or a path (absolute, so the crate can move).
fn dependency(path: Option<&Path>) -> Result<(String, String), String> {
    let source = match path {
        None => {
            let version = env!("CARGO_PKG_VERSION");
            // The caret requirement of the same minor version: "0.1".
            let minor = version.rsplit_once('.').map_or(version, |(mm, _)| mm);
            format!("version = \"{minor}\"")
        }
        Some(path) => {
            let path = std::fs::canonicalize(path)
                .map_err(|e| format!("--idemq-path {}: {e}", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                return Err(format!(
                    "--idemq-path {}: no Cargo.toml there",
                    path.display()
                ));
            }
            let path = path.to_str().filter(|p| !p.contains('\'')).ok_or_else(|| {
                format!(
                    "--idemq-path {}: not a path a TOML literal string can hold",
                    path.display()
                )
            })?;
            format!("path = '{path}'")
        }
    };
    Ok((
        format!("{{ {source} }}"),
        format!("{{ {source}, features = [\"testing\"] }}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_names() {
        assert!(check_name("orders").is_ok());
        assert!(check_name("my_orders-2").is_ok());
        for bad in ["", "2orders", "my orders", "ordres/x", "ö"] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn writes_a_crate_and_refuses_a_full_directory() {
        let dir = std::env::temp_dir().join(format!("idemq-new-{}", std::process::id()));
        let args = NewArgs {
            path: dir.join("shop-orders"),
            name: None,
            idemq_path: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")),
            json: false,
        };
        let (name, written) = create(&args).unwrap_or_else(|_| panic!("created"));
        assert_eq!(name, "shop-orders");
        assert_eq!(written.len(), FILES.len());
        let manifest = std::fs::read_to_string(args.path.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("name = \"shop-orders\""), "{manifest}");
        assert!(manifest.contains("features = [\"testing\"]"), "{manifest}");
        assert!(!manifest.contains("{{"), "a placeholder left: {manifest}");
        assert!(args.path.join("src/main.rs").is_file());
        assert!(args.path.join(".gitignore").is_file());
        // A second run into the same directory changes nothing.
        assert!(matches!(create(&args), Err(Refusal::Usage(_))));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_published_dependency_is_this_minor_version() {
        let (plain, testing) = dependency(None).unwrap();
        assert!(plain.starts_with("{ version = \"0."), "{plain}");
        assert!(testing.ends_with("features = [\"testing\"] }"), "{testing}");
    }
}
