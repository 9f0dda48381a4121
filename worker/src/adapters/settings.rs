//! Reading an arm's `settings` table for an adapter: each adapter names
//! the settings it knows, anything else is refused naming the setting, and
//! every bad value is an [`AdapterError::BadSetting`] that says what to fix.
//!
//! Settings are recorded in every run record, so none of them may hold a
//! secret: a key is named by the environment variable that holds it.

use std::time::Duration;

use cohort_core::config::ArmConfig;
use serde_json::{Map, Value};

use super::AdapterError;
use super::http::{ClarificationRule, MAX_CLARIFICATION_CHARS};

/// One arm's settings, checked against the names an adapter knows.
#[derive(Debug)]
pub(crate) struct Settings<'a> {
    arm: &'a str,
    map: Map<String, Value>,
}

impl<'a> Settings<'a> {
    /// The settings of `arm`; refuses a setting not in `known`.
    pub(crate) fn new(arm: &'a ArmConfig, adapter: &str, known: &[&str]) -> Result<Settings<'a>, AdapterError> {
        let map = match &arm.settings {
            Value::Null => Map::new(),
            Value::Object(m) => m.clone(),
            other => {
                return Err(AdapterError::BadSetting {
                    arm: arm.id.clone(),
                    field: "*".into(),
                    message: format!("settings must be a table, got {other}"),
                });
            }
        };
        let settings = Settings { arm: &arm.id, map };
        if let Some(key) = settings.map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(settings.bad(key, format!("unknown {adapter} setting (known: {})", known.join(", "))));
        }
        Ok(settings)
    }

    pub(crate) fn bad(&self, field: &str, message: impl Into<String>) -> AdapterError {
        AdapterError::BadSetting { arm: self.arm.to_owned(), field: field.to_owned(), message: message.into() }
    }

    /// A non-empty string, if set.
    pub(crate) fn string(&self, field: &str) -> Result<Option<String>, AdapterError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(v) => Err(self.bad(field, format!("must be a non-empty string, got {v}"))),
        }
    }

    /// A non-empty string that must be set.
    pub(crate) fn required_string(&self, field: &str) -> Result<String, AdapterError> {
        self.string(field)?.ok_or_else(|| self.bad(field, "is required"))
    }

    /// A whole number, if set.
    pub(crate) fn whole(&self, field: &str) -> Result<Option<u64>, AdapterError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| self.bad(field, format!("must be a whole number, got {v}"))),
        }
    }

    /// A finite number, if set.
    pub(crate) fn number(&self, field: &str) -> Result<Option<f64>, AdapterError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|n| n.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(field, format!("must be a number, got {v}"))),
        }
    }

    /// A duration in seconds (fractions allowed, more than 0), else `default`.
    pub(crate) fn seconds(&self, field: &str, default: Duration) -> Result<Duration, AdapterError> {
        match self.number(field)? {
            None => Ok(default),
            Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(self.bad(field, format!("must be more than 0 and at most 86400 seconds, got {s}"))),
        }
    }

    /// An array of strings, empty when unset.
    pub(crate) fn strings(&self, field: &str) -> Result<Vec<String>, AdapterError> {
        match self.map.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(field, "must be an array of strings")),
            Some(v) => Err(self.bad(field, format!("must be an array of strings, got {v}"))),
        }
    }

    /// A boolean, if set.
    pub(crate) fn boolean(&self, field: &str) -> Result<Option<bool>, AdapterError> {
        match self.map.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.bad(field, format!("must be true or false, got {v}"))),
        }
    }

    /// The raw value of `field`, if set.
    pub(crate) fn raw(&self, field: &str) -> Option<&Value> {
        self.map.get(field)
    }

    /// The `clarification` rule (see [`ClarificationRule`]), `None` when
    /// unset: no reply is then taken for a clarifying question.
    pub(crate) fn clarification(&self) -> Result<Option<ClarificationRule>, AdapterError> {
        const FIELD: &str = "clarification";
        const KNOWN: [&str; 3] = ["max_chars", "ends_with_question", "phrases"];
        let table = match self.map.get(FIELD) {
            None => return Ok(None),
            Some(Value::Object(t)) => t,
            Some(v) => {
                return Err(
                    self.bad(FIELD, format!("must be a table (max_chars, ends_with_question, phrases), got {v}"))
                );
            }
        };
        if let Some(key) = table.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(self.bad(
                &format!("{FIELD}.{key}"),
                format!("unknown clarification setting (known: {})", KNOWN.join(", ")),
            ));
        }
        let max_chars = match table.get("max_chars") {
            None => {
                return Err(self.bad(
                    &format!("{FIELD}.max_chars"),
                    "is required: replies longer than this are never clarifications",
                ));
            }
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 && n <= MAX_CLARIFICATION_CHARS as u64 => n as usize,
                _ => {
                    return Err(self.bad(
                        &format!("{FIELD}.max_chars"),
                        format!("must be a whole number from 1 to {MAX_CLARIFICATION_CHARS}, got {v}"),
                    ));
                }
            },
        };
        let ends_with_question = match table.get("ends_with_question") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(self.bad(&format!("{FIELD}.ends_with_question"), format!("must be true or false, got {v}")));
            }
        };
        let phrases = match table.get("phrases") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::trim).filter(|p| !p.is_empty()).map(str::to_lowercase))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bad(&format!("{FIELD}.phrases"), "must be an array of non-empty strings"))?,
            Some(v) => {
                return Err(self.bad(&format!("{FIELD}.phrases"), format!("must be an array of strings, got {v}")));
            }
        };
        if !ends_with_question && phrases.is_empty() {
            return Err(self.bad(
                FIELD,
                "needs ends_with_question = true or some phrases: length alone would turn short answers into clarification turns",
            ));
        }
        Ok(Some(ClarificationRule { max_chars, ends_with_question, phrases }))
    }

    /// A table of string values, in key order; empty when unset.
    pub(crate) fn string_table(&self, field: &str) -> Result<Vec<(String, String)>, AdapterError> {
        match self.map.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(self.bad(field, format!("{k}: must be a string, got {other}"))),
                })
                .collect(),
            Some(v) => Err(self.bad(field, format!("must be a table of strings, got {v}"))),
        }
    }
}
