//! The environment's forms: `TICKLER_SECTION_KEY` for a setting, a list as
//! `a,b`, a map or a table inline; and the flat names of before the
//! sections, in a file or a variable.

use std::collections::BTreeMap;

use figment::providers::{Format, Serialized, Toml};
use figment::{Figment, Provider};

use super::{Config, ConfigError, Role, RENAMED};

/// The variable that sets the setting at `path`: `TICKLER_` and the path in
/// capitals, its dot an underscore (`loader.window_ms` is
/// `TICKLER_LOADER_WINDOW_MS`).
pub fn env_name(path: &str) -> String {
    format!("TICKLER_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// The key path a variable names (without `TICKLER_`), and whether it is a
/// flat name of before the sections; None for a variable that is not a
/// setting.
pub(super) fn env_path(name: &str) -> Option<(String, bool)> {
    let name = name.to_ascii_lowercase();
    if let Some(path) = Config::keys()
        .into_iter()
        .find(|path| path.replace('.', "_") == name)
    {
        return Some((path, false));
    }
    RENAMED
        .iter()
        .find(|(old, _)| *old == name)
        .map(|(_, new)| ((*new).to_owned(), true))
}

/// `figment` with the variable `var`, which sets `path`, merged in its
/// form: a list, a map, a table, or a value.
pub(super) fn env_merge(figment: Figment, var: &str, path: &str) -> Result<Figment, ConfigError> {
    let Ok(text) = std::env::var(var) else {
        return Ok(figment);
    };
    if ENV_LISTS.contains(&path) {
        let list = env_list(&text);
        // Checked here, so that a mistake names the variable.
        if path == "roles" {
            if let Some(unknown) = list
                .iter()
                .find(|name| !Role::ALL.iter().any(|role| role.as_str() == *name))
            {
                let known: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
                return Err(ConfigError::Invalid {
                    field: "roles".into(),
                    problem: format!(
                        "{var}: unknown role {unknown:?} (known: {})",
                        known.join(", ")
                    ),
                });
            }
        }
        return Ok(figment.merge(Serialized::default(path, list)));
    }
    if ENV_MAPS.contains(&path) {
        let map = env_map(&text).map_err(|problem| ConfigError::Invalid {
            field: path.to_owned().into(),
            problem: format!("{var}: {problem}"),
        })?;
        return Ok(figment.merge(Serialized::default(path, map)));
    }
    if ENV_TABLES.contains(&path) {
        let table = format!("{path} = {}", text.trim());
        // Checked on its own first, so a mistake names the variable.
        Figment::from(Toml::string(&table))
            .extract_inner::<figment::value::Value>(path)
            .map_err(|_| ConfigError::Invalid {
                field: path.to_owned().into(),
                problem: format!(
                    "{var}: not an inline TOML table such as {{topics={{\"tickler.requests\"={{targets=[\"orders.*\"]}}}}}}"
                ),
            })?;
        return Ok(figment.merge(Toml::string(&table)));
    }
    Ok(figment.merge(EnvVar {
        var: var.to_owned(),
        path: path.to_owned(),
        text,
    }))
}

/// One variable's value (read as the environment's values are: a number, a
/// boolean, or else a string) at its setting's key path, named by the
/// variable in errors.
struct EnvVar {
    var: String,
    path: String,
    text: String,
}

impl Provider for EnvVar {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(format!("environment variable {}", self.var))
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let value: figment::value::Value = match self.text.parse() {
            Ok(value) => value,
            Err(never) => match never {},
        };
        let dict = figment::util::nest(&self.path, value)
            .into_dict()
            .unwrap_or_default();
        Ok(figment::Profile::Default.collect(dict))
    }
}

/// A configuration file whose settings may still be given by their flat
/// names of before the sections: each is moved to its section's key (where
/// the file does not give that key too).
pub(super) struct FlatNamesMoved(pub(super) figment::providers::Data<Toml>);

impl Provider for FlatNamesMoved {
    fn metadata(&self) -> figment::Metadata {
        self.0.metadata()
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        use figment::value::{Dict, Value};
        let mut data = self.0.data()?;
        for dict in data.values_mut() {
            for (old, new) in RENAMED {
                let Some(value) = dict.remove(*old) else {
                    continue;
                };
                let Some((section, key)) = new.split_once('.') else {
                    continue;
                };
                let entry = dict
                    .entry(section.to_owned())
                    .or_insert_with(|| Value::from(Dict::new()));
                if let Value::Dict(_, section) = entry {
                    section.entry(key.to_owned()).or_insert(value);
                }
            }
        }
        Ok(data)
    }
}

/// List settings, given in the environment as `a,b,c` (or `[a, b]`).
const ENV_LISTS: &[&str] = &["roles", "jobs.topics_allowed"];
/// Map settings of strings, given in the environment as an inline TOML
/// table whose keys may be dotted without quotes, as librdkafka's are:
/// `{security.protocol="SSL", ssl.ca.location="/etc/ca.pem"}`.
const ENV_MAPS: &[&str] = &["kafka.options"];

/// Table settings, given in the environment as an inline TOML table:
/// `TICKLER_INGRESS='{reply_topic="tickler.replies", topics={"tickler.requests"={targets=["orders.*"]}}}'`.
const ENV_TABLES: &[&str] = &["ingress"];

/// `api,dispatcher`, `[api, dispatcher]` or `["api","dispatcher"]`: the
/// items, trimmed, without quotes; empty items dropped.
pub(super) fn env_list(text: &str) -> Vec<String> {
    let text = text.trim();
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner
        .split(',')
        .map(|item| {
            item.trim()
                .trim_matches(|c| c == '"' || c == '\'')
                .to_owned()
        })
        .filter(|item| !item.is_empty())
        .collect()
}

/// An inline TOML table of strings, numbers or booleans, flattened: a
/// dotted key without quotes (`security.protocol="SSL"`, which TOML reads
/// as nested tables) and a quoted one (`"security.protocol"="SSL"`) give
/// the same entry. Values become strings, as librdkafka takes them.
pub(super) fn env_map(text: &str) -> Result<BTreeMap<String, String>, String> {
    use figment::value::Value;

    fn flatten(
        prefix: &str,
        value: &Value,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        match value {
            Value::Dict(_, dict) => {
                for (key, value) in dict {
                    let key = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    flatten(&key, value, out)?;
                }
                Ok(())
            }
            Value::String(_, text) => {
                out.insert(prefix.to_owned(), text.clone());
                Ok(())
            }
            Value::Bool(_, b) => {
                out.insert(prefix.to_owned(), b.to_string());
                Ok(())
            }
            Value::Num(_, n) => {
                let text = n
                    .to_i128()
                    .map(|i| i.to_string())
                    .or_else(|| n.to_f64().map(|f| f.to_string()))
                    .unwrap_or_default();
                out.insert(prefix.to_owned(), text);
                Ok(())
            }
            _ => Err(format!(
                "{prefix:?} must be a string, a number or a boolean"
            )),
        }
    }

    let table: Value = Figment::from(Toml::string(&format!("map = {}", text.trim())))
        .extract_inner("map")
        // The parser's message would quote the value, which may hold a
        // password: only the form that works is said.
        .map_err(|_| {
            "not an inline table such as {security.protocol=\"SSL\", ssl.ca.location=\"/etc/ca.pem\"}".to_owned()
        })?;
    let mut out = BTreeMap::new();
    flatten("", &table, &mut out)?;
    Ok(out)
}
