//! Host-tool argument schemas: a small subset of JSON Schema, checked by
//! hand at the registry's one door.
//!
//! Supported: `type` (`object`, `string`, `integer`, `number`, `boolean`,
//! `array`), `properties`, `required`, `additionalProperties: false` (also
//! the default: an object never takes properties its schema does not name),
//! `items`, `maxItems`, `maxLength`, string `enum`, `minimum`, `maximum`,
//! and the annotations `description` and `title`. Any other keyword is
//! refused when the schema is read, because a validator that skips a
//! constraint it does not understand passes what the author meant to refuse.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// A checked schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Schema {
    /// Exactly the named properties; those in `required` must be present.
    Object {
        properties: BTreeMap<String, Schema>,
        required: BTreeSet<String>,
    },
    String {
        max_length: Option<usize>,
        one_of: Option<Vec<String>>,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
    },
    Number,
    Boolean,
    Array {
        items: Box<Schema>,
        max_items: Option<usize>,
    },
}

/// A schema that cannot be read, or a value it refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("schema at `{at}`: {reason}; the supported keywords are `type`, `properties`, `required`, `additionalProperties: false`, `items`, `maxItems`, `maxLength`, `enum` (strings), `minimum`, `maximum`, `description`, `title`")]
    Unsupported { at: String, reason: String },
    #[error("argument `{at}`: {reason}")]
    Invalid { at: String, reason: String },
}

/// The deepest schema read; deeper nesting is refused.
pub const MAX_SCHEMA_DEPTH: usize = 16;

fn unsupported(at: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError::Unsupported {
        at: at.to_string(),
        reason: reason.into(),
    }
}

fn invalid(at: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError::Invalid {
        at: if at.is_empty() {
            "/".into()
        } else {
            at.to_string()
        },
        reason: reason.into(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Schema {
    /// A schema with the named properties, all required, and no others.
    pub fn object(properties: impl IntoIterator<Item = (&'static str, Schema)>) -> Schema {
        let properties: BTreeMap<String, Schema> = properties
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let required = properties.keys().cloned().collect();
        Schema::Object {
            properties,
            required,
        }
    }

    /// Reads the supported subset of a JSON Schema document.
    pub fn from_json(v: &Value) -> Result<Schema, SchemaError> {
        Schema::read(v, "#", 0)
    }

    fn read(v: &Value, at: &str, depth: usize) -> Result<Schema, SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(unsupported(
                at,
                format!("it nests deeper than {MAX_SCHEMA_DEPTH}"),
            ));
        }
        let Value::Object(m) = v else {
            return Err(unsupported(at, "a schema is an object"));
        };
        let ty = m
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| unsupported(at, "`type` is missing or not a single string"))?;
        let allowed: &[&str] = match ty {
            "object" => &["properties", "required", "additionalProperties"],
            "string" => &["maxLength", "enum"],
            "integer" => &["minimum", "maximum"],
            "number" | "boolean" => &[],
            "array" => &["items", "maxItems"],
            other => return Err(unsupported(at, format!("type `{other}` is not supported"))),
        };
        for k in m.keys() {
            let annotation = matches!(k.as_str(), "type" | "description" | "title");
            if !annotation && !allowed.contains(&k.as_str()) {
                return Err(unsupported(
                    at,
                    format!("keyword `{k}` is not supported for type `{ty}`"),
                ));
            }
        }
        let usize_of = |key: &str| -> Result<Option<usize>, SchemaError> {
            match m.get(key) {
                None => Ok(None),
                Some(n) => n
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| unsupported(at, format!("`{key}` is not a whole number"))),
            }
        };
        let i64_of = |key: &str| -> Result<Option<i64>, SchemaError> {
            match m.get(key) {
                None => Ok(None),
                Some(n) => n
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| unsupported(at, format!("`{key}` is not an integer"))),
            }
        };
        Ok(match ty {
            "object" => {
                match m.get("additionalProperties") {
                    None | Some(Value::Bool(false)) => {}
                    Some(_) => {
                        return Err(unsupported(
                            at,
                            "only `additionalProperties: false` is supported: an argument the schema does not name is refused",
                        ))
                    }
                }
                let mut properties = BTreeMap::new();
                match m.get("properties") {
                    None => {}
                    Some(Value::Object(props)) => {
                        for (k, s) in props {
                            properties.insert(
                                k.clone(),
                                Schema::read(s, &format!("{at}/properties/{k}"), depth + 1)?,
                            );
                        }
                    }
                    Some(_) => return Err(unsupported(at, "`properties` is not an object")),
                }
                let mut required = BTreeSet::new();
                match m.get("required") {
                    None => {}
                    Some(Value::Array(names)) => {
                        for n in names {
                            let n = n
                                .as_str()
                                .ok_or_else(|| unsupported(at, "`required` holds a non-string"))?;
                            if !properties.contains_key(n) {
                                return Err(unsupported(at, format!("`required` names `{n}`, which `properties` does not define")));
                            }
                            required.insert(n.to_string());
                        }
                    }
                    Some(_) => return Err(unsupported(at, "`required` is not an array")),
                }
                Schema::Object {
                    properties,
                    required,
                }
            }
            "string" => {
                let one_of = match m.get("enum") {
                    None => None,
                    Some(Value::Array(vs)) => Some(
                        vs.iter()
                            .map(|v| v.as_str().map(str::to_string))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| unsupported(at, "`enum` may only hold strings"))?,
                    ),
                    Some(_) => return Err(unsupported(at, "`enum` is not an array")),
                };
                Schema::String {
                    max_length: usize_of("maxLength")?,
                    one_of,
                }
            }
            "integer" => Schema::Integer {
                minimum: i64_of("minimum")?,
                maximum: i64_of("maximum")?,
            },
            "number" => Schema::Number,
            "boolean" => Schema::Boolean,
            _ => {
                let items = m
                    .get("items")
                    .ok_or_else(|| unsupported(at, "an array schema needs `items`"))?;
                Schema::Array {
                    items: Box::new(Schema::read(items, &format!("{at}/items"), depth + 1)?),
                    max_items: usize_of("maxItems")?,
                }
            }
        })
    }

    /// Checks a value; the error names the JSON pointer of the first
    /// offending part.
    pub fn validate(&self, v: &Value) -> Result<(), SchemaError> {
        self.check(v, "")
    }

    fn check(&self, v: &Value, at: &str) -> Result<(), SchemaError> {
        let wrong = |want: &str| invalid(at, format!("expected {want}, got {}", type_name(v)));
        match self {
            Schema::Object {
                properties,
                required,
            } => {
                let Value::Object(m) = v else {
                    return Err(wrong("an object"));
                };
                for k in m.keys() {
                    if !properties.contains_key(k) {
                        let known: Vec<String> =
                            properties.keys().map(|k| format!("`{k}`")).collect();
                        return Err(invalid(
                            at,
                            format!(
                                "unknown property `{k}`; the tool takes {}",
                                if known.is_empty() {
                                    "no arguments".to_string()
                                } else {
                                    known.join(", ")
                                }
                            ),
                        ));
                    }
                }
                for r in required {
                    if !m.contains_key(r) {
                        return Err(invalid(at, format!("required property `{r}` is missing")));
                    }
                }
                for (k, val) in m {
                    if let Some(s) = properties.get(k) {
                        s.check(val, &format!("{at}/{k}"))?;
                    }
                }
                Ok(())
            }
            Schema::String { max_length, one_of } => {
                let Value::String(s) = v else {
                    return Err(wrong("a string"));
                };
                if let Some(max) = max_length {
                    let n = s.chars().count();
                    if n > *max {
                        return Err(invalid(
                            at,
                            format!("{n} characters, above the schema's `maxLength` of {max}"),
                        ));
                    }
                }
                if let Some(vals) = one_of {
                    if !vals.contains(s) {
                        let vals: Vec<String> = vals.iter().map(|v| format!("`{v}`")).collect();
                        return Err(invalid(
                            at,
                            format!("`{s}` is not one of {}", vals.join(", ")),
                        ));
                    }
                }
                Ok(())
            }
            Schema::Integer { minimum, maximum } => {
                let Some(n) = v.as_i64() else {
                    return Err(wrong("an integer"));
                };
                if let Some(min) = minimum {
                    if n < *min {
                        return Err(invalid(at, format!("{n} is below the minimum {min}")));
                    }
                }
                if let Some(max) = maximum {
                    if n > *max {
                        return Err(invalid(at, format!("{n} is above the maximum {max}")));
                    }
                }
                Ok(())
            }
            Schema::Number => match v {
                Value::Number(_) => Ok(()),
                _ => Err(wrong("a number")),
            },
            Schema::Boolean => match v {
                Value::Bool(_) => Ok(()),
                _ => Err(wrong("a boolean")),
            },
            Schema::Array { items, max_items } => {
                let Value::Array(xs) = v else {
                    return Err(wrong("an array"));
                };
                if let Some(max) = max_items {
                    if xs.len() > *max {
                        return Err(invalid(
                            at,
                            format!("{} items, above the schema's `maxItems` of {max}", xs.len()),
                        ));
                    }
                }
                for (i, x) in xs.iter().enumerate() {
                    items.check(x, &format!("{at}/{i}"))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_keywords_are_refused_when_read() {
        for s in [
            json!({"type": "string", "pattern": "^a$"}),
            json!({"type": "object", "additionalProperties": true}),
            json!({"type": "object", "properties": {}, "required": ["x"]}),
            json!({"type": ["string", "null"]}),
            json!({"type": "array"}),
            json!({"type": "integer", "minimum": 1.5}),
        ] {
            assert!(Schema::from_json(&s).is_err(), "{s} was accepted");
        }
    }

    #[test]
    fn values_are_checked_against_the_subset() {
        let s = Schema::from_json(&json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 5},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "units": {"type": "string", "enum": ["c", "f"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
            },
            "required": ["city"]
        }))
        .unwrap();
        assert!(s
            .validate(&json!({"city": "Ghent", "days": 3, "units": "c", "tags": ["a"]}))
            .is_ok());
        for bad in [
            json!({}),
            json!({"city": "Antwerp"}),
            json!({"city": "Ghent", "days": 0}),
            json!({"city": "Ghent", "days": 8}),
            json!({"city": "Ghent", "days": "3"}),
            json!({"city": "Ghent", "units": "k"}),
            json!({"city": "Ghent", "tags": ["a", "b", "c"]}),
            json!({"city": "Ghent", "tags": [1]}),
            json!({"city": "Ghent", "extra": true}),
            json!(["Ghent"]),
        ] {
            assert!(s.validate(&bad).is_err(), "{bad} was accepted");
        }
    }
}
