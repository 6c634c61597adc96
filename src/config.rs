//! Configuration layering: defaults < config file < `SWITCHBOARD_*` environment < flags.
//!
//! Every flag of every role already has a `SWITCHBOARD_*` variable (clap reads it, and a flag
//! wins over it). A config file is one more layer below the environment: before the command
//! line is parsed, each key of the file's table for the chosen role fills that flag's
//! variable when the environment has not set it. So the precedence is clap's own, and
//! `--print-config` can say for each value where it came from.
//!
//! The file is TOML with one table per role (`[control]`, `[router]`, `[gateway]`, `[up]`, …);
//! keys are long flag names with `-` written `_`; tables of other roles are ignored, so one
//! file serves a whole deployment. An unknown key is an error naming it.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};

/// The variable naming a config file when `--config` is not given.
pub const CONFIG_ENV: &str = "SWITCHBOARD_CONFIG";

/// Flags that belong to the layering itself and are never printed or read from a file.
const OWN_FLAGS: [&str; 4] = ["config", "print_config", "help", "version"];

/// What the config file contributed: the variables it set, so their values print as `file`.
#[derive(Debug, Default)]
pub struct FileLayer {
    pub path: Option<PathBuf>,
    pub set_vars: BTreeSet<String>,
}

/// The config file named by `--config <path>`/`--config=<path>` anywhere on the command line,
/// or else by `SWITCHBOARD_CONFIG`.
fn config_path(argv: &[OsString]) -> Option<PathBuf> {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        }
        if text == "--config" {
            return args.next().map(PathBuf::from);
        }
        if let Some(path) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os(CONFIG_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The role the command line names: its first word that is a subcommand of `cli`.
fn role_of<'a>(cli: &'a Command, argv: &[OsString]) -> Option<&'a Command> {
    argv.iter()
        .skip(1)
        .find_map(|a| cli.find_subcommand(a.to_string_lossy().as_ref()))
}

/// A flag's key in a config file and in `--print-config`.
fn key_of(arg: &Arg) -> String {
    arg.get_long()
        .map(str::to_string)
        .unwrap_or_else(|| arg.get_id().to_string())
        .replace('-', "_")
}

/// The variables the file sets, checked against the role's flags; nothing is set yet.
pub fn file_assignments(
    role: &Command,
    path: &Path,
    text: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let table: toml::Table =
        toml::from_str(text).with_context(|| format!("config file {}", path.display()))?;
    let Some(section) = table.get(role.get_name()) else {
        return Ok(Vec::new());
    };
    let Some(section) = section.as_table() else {
        bail!(
            "config file {}: [{}] is not a table",
            path.display(),
            role.get_name()
        );
    };
    let mut out = Vec::new();
    for (key, value) in section {
        let arg = role
            .get_arguments()
            .filter(|a| !OWN_FLAGS.contains(&a.get_id().as_str()))
            .find(|a| key_of(a) == *key);
        let Some(arg) = arg else {
            bail!(
                "config file {}: [{}] has no setting `{key}` (see `switchboard {} --help`)",
                path.display(),
                role.get_name(),
                role.get_name()
            );
        };
        let Some(var) = arg.get_env() else {
            bail!(
                "config file {}: [{}] `{key}` can only be given as a flag",
                path.display(),
                role.get_name()
            );
        };
        let text = scalar_text(value)
            .or_else(|| {
                let items = value.as_array()?;
                let delimiter = arg.get_value_delimiter()?;
                let parts: Option<Vec<String>> = items.iter().map(scalar_text).collect();
                Some(parts?.join(&delimiter.to_string()))
            })
            .with_context(|| {
                format!(
                    "config file {}: [{}] `{key}` must be a string, number or boolean{}",
                    path.display(),
                    role.get_name(),
                    if arg.get_value_delimiter().is_some() {
                        ", or a list of them"
                    } else {
                        ""
                    }
                )
            })?;
        out.push((var.to_string_lossy().into_owned(), text));
    }
    Ok(out)
}

fn scalar_text(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads the config file, if one is named, into the environment below what is already set.
/// Call before any thread starts: it sets process environment variables.
pub fn apply_file(cli: &Command, argv: &[OsString]) -> anyhow::Result<FileLayer> {
    let Some(path) = config_path(argv) else {
        return Ok(FileLayer::default());
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    let mut layer = FileLayer {
        path: Some(path.clone()),
        set_vars: BTreeSet::new(),
    };
    let Some(role) = role_of(cli, argv) else {
        return Ok(layer);
    };
    for (var, value) in file_assignments(role, &path, &text)? {
        if std::env::var_os(&var).is_some() {
            continue;
        }
        // SAFETY: called from `main` before the runtime or any other thread exists, so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var(&var, value) };
        layer.set_vars.insert(var);
    }
    Ok(layer)
}

/// Hides the secret parts of a value: a URL's password and secret-looking query parameters,
/// or the whole value of a secret-looking key.
pub fn redact(key: &str, value: &str) -> String {
    const SECRET_WORDS: [&str; 4] = ["secret", "token", "password", "credential"];
    if SECRET_WORDS.iter().any(|w| key.contains(w)) {
        return "<redacted>".to_string();
    }
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_string();
    };
    let (authority_end, _) = rest
        .char_indices()
        .find(|(_, c)| matches!(c, '/' | '?' | '#'))
        .unwrap_or((rest.len(), ' '));
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:<redacted>@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if SECRET_WORDS.iter().any(|w| k.to_lowercase().contains(w)) => {
                        format!("{k}=<redacted>")
                    }
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// A value as TOML: numbers and booleans bare, everything else a string.
fn toml_value(raw: &str) -> toml::Value {
    if let Ok(i) = raw.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    match raw {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(raw.to_string()),
    }
}

/// The effective configuration of the chosen role, in the config file's own format (so it can
/// be saved as one), secrets redacted, each value followed by where it came from.
pub fn print_config(cli: &Command, matches: &ArgMatches, layer: &FileLayer) -> String {
    let Some((name, role_matches)) = matches.subcommand() else {
        return String::new();
    };
    let Some(role) = cli.find_subcommand(name) else {
        return String::new();
    };
    let mut out = format!(
        "# switchboard {name}: the effective configuration (defaults < config file < \
         SWITCHBOARD_* environment < flags), secrets redacted.\n"
    );
    if let Some(path) = &layer.path {
        out.push_str(&format!("# config file: {}\n", path.display()));
    }
    out.push_str(&format!("[{name}]\n"));
    for arg in role.get_arguments() {
        let id = arg.get_id().as_str();
        if OWN_FLAGS.contains(&id) {
            continue;
        }
        let key = key_of(arg);
        let values: Vec<String> = role_matches
            .get_raw(id)
            .map(|vals| {
                vals.map(|v| redact(&key, &v.to_string_lossy()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let source = match role_matches.value_source(id) {
            Some(ValueSource::CommandLine) => "flag".to_string(),
            Some(ValueSource::EnvVariable) => {
                let var = arg
                    .get_env()
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if layer.set_vars.contains(&var) {
                    "file".to_string()
                } else {
                    format!("env {var}")
                }
            }
            Some(ValueSource::DefaultValue) => "default".to_string(),
            _ => "not set".to_string(),
        };
        if values.is_empty() {
            out.push_str(&format!("# {key} is not set\n"));
            continue;
        }
        let value = if arg.get_value_delimiter().is_some() {
            toml::Value::Array(values.iter().map(|v| toml_value(v)).collect())
        } else {
            toml_value(&values.join(","))
        };
        out.push_str(&format!("{key} = {value}  # {source}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_password_is_redacted_and_the_rest_kept() {
        assert_eq!(
            redact(
                "database_url",
                "postgres://sb:hunter2@db:5432/sb?sslmode=require"
            ),
            "postgres://sb:<redacted>@db:5432/sb?sslmode=require"
        );
        assert_eq!(
            redact("database_url", "postgres://db/sb?user=sb&password=hunter2"),
            "postgres://db/sb?user=sb&password=<redacted>"
        );
        assert_eq!(
            redact("database_url", "sqlite:///var/lib/sb/control.db?mode=rwc"),
            "sqlite:///var/lib/sb/control.db?mode=rwc"
        );
        assert_eq!(redact("dev_token", "sbe_abc"), "<redacted>");
        assert_eq!(redact("listen", "0.0.0.0:7701"), "0.0.0.0:7701");
    }

    #[test]
    fn the_config_path_comes_from_the_flag_before_the_environment() {
        let argv: Vec<OsString> = ["switchboard", "control", "--config", "/x.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(config_path(&argv), Some(PathBuf::from("/x.toml")));
        let argv: Vec<OsString> = ["switchboard", "--config=/y.toml", "router"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(config_path(&argv), Some(PathBuf::from("/y.toml")));
    }
}
