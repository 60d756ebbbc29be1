//! Typed reading of a TOML table with errors that name file, line and key.
//!
//! A [`TableReader`] wraps one TOML table and a key prefix (`tunnel`,
//! `path[2]`). Each getter records which keys were read; [`TableReader::finish`]
//! then reports every key that no getter asked for as unknown, suggesting
//! the nearest valid key (Levenshtein distance). Invariant: a getter never
//! panics; a wrong type or value becomes a [`ConfigError`] and the getter
//! returns `None`, so that all errors of a file are reported in one pass.

use std::fmt;
use std::ops::Range;

use toml_edit::{Item, Table, Value};

/// One configuration error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    /// Dotted key such as `path[2].weight`, or empty for file-level errors.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Shared context: the source text (for line numbers) and collected errors.
pub struct Ctx<'s> {
    pub file: String,
    pub src: &'s str,
    pub errors: Vec<ConfigError>,
    /// Byte offset at which each line starts (computed once, so that
    /// finding a line is a binary search and validation stays linear).
    line_starts: Vec<usize>,
}

impl<'s> Ctx<'s> {
    pub fn new(file: String, src: &'s str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(
                src.bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        Self {
            file,
            src,
            errors: vec![],
            line_starts,
        }
    }

    pub fn line_of(&self, span: Option<Range<usize>>) -> Option<usize> {
        let s = span?.start.min(self.src.len());
        Some(self.line_starts.partition_point(|&start| start <= s))
    }

    pub fn error(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        let line = self.line_of(span);
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line,
            key: key.to_string(),
            message: message.into(),
        });
    }
}

/// The nearest candidate to `word`, if it is close enough to be a typo.
pub fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 2))
        .min()
        .map(|(_, c)| c)
}

fn type_name(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(v) => match v {
            Value::String(_) => "a string",
            Value::Integer(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Boolean(_) => "a boolean",
            Value::Datetime(_) => "a date-time",
            Value::Array(_) => "an array",
            Value::InlineTable(_) => "an inline table",
        },
    }
}

/// Reads keys of one table; see the module documentation.
pub struct TableReader<'t> {
    table: &'t Table,
    prefix: String,
    known: &'static [&'static str],
}

impl<'t> TableReader<'t> {
    pub fn new(
        table: &'t Table,
        prefix: impl Into<String>,
        known: &'static [&'static str],
    ) -> Self {
        Self {
            table,
            prefix: prefix.into(),
            known,
        }
    }

    pub fn key(&self, k: &str) -> String {
        if self.prefix.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.prefix)
        }
    }

    pub fn span(&self, k: &str) -> Option<Range<usize>> {
        let (key, item) = self.table.get_key_value(k)?;
        item.span().or_else(|| key.span())
    }

    pub fn table_span(&self) -> Option<Range<usize>> {
        self.table.span()
    }

    fn item(&self, k: &str) -> Option<&'t Item> {
        debug_assert!(self.known.contains(&k), "getter for undeclared key {k}");
        self.table.get(k).filter(|i| !i.is_none())
    }

    fn wrong_type(&self, ctx: &mut Ctx<'_>, k: &str, want: &str, item: &Item) {
        ctx.error(
            self.span(k),
            &self.key(k),
            format!("expected {want}, found {}", type_name(item)),
        );
    }

    pub fn required<T>(&self, ctx: &mut Ctx<'_>, k: &str, v: Option<T>) -> Option<T> {
        if v.is_none() && self.table.get(k).is_none() {
            ctx.error(
                self.table_span(),
                &self.key(k),
                "missing (this key is required)",
            );
        }
        v
    }

    pub fn string(&self, ctx: &mut Ctx<'_>, k: &str) -> Option<String> {
        let item = self.item(k)?;
        match item.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                self.wrong_type(ctx, k, "a string", item);
                None
            }
        }
    }

    /// An integer in `range` (inclusive).
    pub fn int(&self, ctx: &mut Ctx<'_>, k: &str, range: (i64, i64)) -> Option<i64> {
        let item = self.item(k)?;
        match item.as_integer() {
            Some(v) if v >= range.0 && v <= range.1 => Some(v),
            Some(v) => {
                ctx.error(
                    self.span(k),
                    &self.key(k),
                    format!("{v} is out of range (allowed: {} to {})", range.0, range.1),
                );
                None
            }
            None => {
                self.wrong_type(ctx, k, "an integer", item);
                None
            }
        }
    }

    pub fn boolean(&self, ctx: &mut Ctx<'_>, k: &str) -> Option<bool> {
        let item = self.item(k)?;
        match item.as_bool() {
            Some(b) => Some(b),
            None => {
                self.wrong_type(ctx, k, "true or false", item);
                None
            }
        }
    }

    /// An array of strings.
    pub fn strings(&self, ctx: &mut Ctx<'_>, k: &str) -> Option<Vec<String>> {
        let item = self.item(k)?;
        let Some(arr) = item.as_array() else {
            self.wrong_type(ctx, k, "an array of strings", item);
            return None;
        };
        let mut out = vec![];
        for (i, v) in arr.iter().enumerate() {
            match v.as_str() {
                Some(s) => out.push(s.to_string()),
                None => {
                    ctx.error(
                        v.span().or(self.span(k)),
                        &format!("{}[{}]", self.key(k), i + 1),
                        "expected a string",
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    /// Parse a string value with `parse`, reporting `what` on failure.
    pub fn parsed<T, E: fmt::Display>(
        &self,
        ctx: &mut Ctx<'_>,
        k: &str,
        what: &str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Option<T> {
        let s = self.string(ctx, k)?;
        match parse(&s) {
            Ok(v) => Some(v),
            Err(e) => {
                ctx.error(
                    self.span(k),
                    &self.key(k),
                    format!("'{s}' is not {what} ({e})"),
                );
                None
            }
        }
    }

    /// One of `choices`.
    pub fn choice(
        &self,
        ctx: &mut Ctx<'_>,
        k: &str,
        choices: &[&'static str],
    ) -> Option<&'static str> {
        let s = self.string(ctx, k)?;
        if let Some(c) = choices.iter().find(|c| **c == s) {
            return Some(c);
        }
        let hint = suggest(&s, choices)
            .map(|c| format!("; did you mean '{c}'?"))
            .unwrap_or_default();
        ctx.error(
            self.span(k),
            &self.key(k),
            format!("'{s}' is not one of {}{hint}", choices.join(", ")),
        );
        None
    }

    /// Report every key not in the known list, with a suggestion.
    pub fn finish(&self, ctx: &mut Ctx<'_>) {
        for (k, item) in self.table.iter() {
            if self.known.contains(&k) {
                continue;
            }
            let span = self
                .table
                .key(k)
                .and_then(|key| key.span())
                .or_else(|| item.span());
            let hint = match suggest(k, self.known) {
                Some(s) => format!("; did you mean '{s}'?"),
                None => format!("; valid keys here: {}", self.known.join(", ")),
            };
            ctx.error(span, &self.key(k), format!("unknown key{hint}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(suggest("wieght", &["weight", "name"]), Some("weight"));
        assert_eq!(
            suggest("keepalive", &["keepalive_ms", "dead_ms"]),
            Some("keepalive_ms")
        );
        assert_eq!(suggest("zzz", &["weight", "name"]), None);
    }

    #[test]
    fn display_names_file_line_and_key() {
        let e = ConfigError {
            file: "a.toml".into(),
            line: Some(3),
            key: "path[1].weight".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "a.toml:3: path[1].weight: bad");
    }
}
