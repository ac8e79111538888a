//! Parse INI-style configuration (`[section]` headers and `key = value` lines) into typed lookups.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, PartialEq)]
pub enum ConfigError {
    Syntax { line: usize, message: String },
    Missing { section: String, key: String },
    Invalid { section: String, key: String, value: String, expected: &'static str },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Syntax { line, message } => write!(f, "line {}: {}", line, message),
            ConfigError::Missing { section, key } => write!(f, "[{}] {} is required", section, key),
            ConfigError::Invalid { section, key, value, expected } => {
                write!(f, "[{}] {} = {:?}: expected {}", section, key, value, expected)
            }
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Default)]
pub struct Config {
    sections: BTreeMap<String, BTreeMap<String, String>>,
}

impl FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut config = Config::default();
        let mut current = String::from("global");
        for (number, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(rest) = line.strip_prefix('[') {
                let name = rest.strip_suffix(']').ok_or_else(|| ConfigError::Syntax {
                    line: number + 1,
                    message: format!("unclosed section header {:?}", line),
                })?;
                current = name.trim().to_lowercase();
                config.sections.entry(current.clone()).or_default();
                continue;
            }
            let (key, value) = line.split_once('=').ok_or_else(|| ConfigError::Syntax {
                line: number + 1,
                message: "expected `key = value`".to_string(),
            })?;
            let value = value.trim().trim_matches('"').to_string();
            config.sections.entry(current.clone()).or_default().insert(key.trim().to_lowercase(), value);
        }
        Ok(config)
    }
}

impl Config {
    pub fn get_str(&self, section: &str, key: &str) -> Option<&str> {
        self.sections.get(section)?.get(key).map(String::as_str)
    }

    pub fn require_str(&self, section: &str, key: &str) -> Result<&str, ConfigError> {
        self.get_str(section, key).ok_or_else(|| ConfigError::Missing { section: section.into(), key: key.into() })
    }

    /// Parses the value with `T::from_str`, or returns `default` when the key is absent.
    pub fn get_or<T: FromStr>(&self, section: &str, key: &str, default: T, expected: &'static str) -> Result<T, ConfigError> {
        match self.get_str(section, key) {
            None => Ok(default),
            Some(value) => value.parse().map_err(|_| ConfigError::Invalid {
                section: section.into(),
                key: key.into(),
                value: value.into(),
                expected,
            }),
        }
    }

    pub fn get_bool(&self, section: &str, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get_str(section, key).map(|v| v.to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if matches!(v.as_str(), "1" | "yes" | "true" | "on") => Ok(true),
            Some(v) if matches!(v.as_str(), "0" | "no" | "false" | "off") => Ok(false),
            Some(v) => Err(ConfigError::Invalid { section: section.into(), key: key.into(), value: v, expected: "a boolean" }),
        }
    }

    pub fn section_names(&self) -> impl Iterator<Item = &str> {
        self.sections.keys().map(String::as_str)
    }
}

#[derive(Debug)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub workers: usize,
    pub tls: bool,
}

impl ServerConfig {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        Ok(ServerConfig {
            host: config.require_str("server", "host")?.to_string(),
            port: config.get_or("server", "port", 8080, "a port number")?,
            workers: config.get_or("server", "workers", 4, "a positive integer")?,
            tls: config.get_bool("server", "tls", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# example\n[server]\nhost = \"0.0.0.0\"\nport = 9000\ntls = yes\n";

    #[test]
    fn reads_typed_values() {
        let config: Config = SAMPLE.parse().unwrap();
        let server = ServerConfig::from_config(&config).unwrap();
        assert_eq!((server.host.as_str(), server.port, server.workers, server.tls), ("0.0.0.0", 9000, 4, true));
    }

    #[test]
    fn rejects_bad_port() {
        let config: Config = "[server]\nhost = a\nport = 70000\n".parse().unwrap();
        let err = ServerConfig::from_config(&config).unwrap_err();
        assert_eq!(err.to_string(), "[server] port = \"70000\": expected a port number");
    }
}
