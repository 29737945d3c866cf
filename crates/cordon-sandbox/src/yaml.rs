//! The YAML reading shared by specs and the host configuration: `marked-yaml`
//! with duplicate keys refused and no type coercion (every scalar is a
//! string cordon types itself), and serde for the shape, with every failure
//! positioned.

use marked_yaml::Spanned;

/// Why a YAML document could not be read into its raw shape.
pub struct Failure {
    /// True for a syntax error, false for a shape error (unknown, missing or
    /// mistyped field).
    pub syntax: bool,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// `(line, column)` of a node, 1-based; `(1, 1)` where the loader kept none.
pub fn pos<T>(s: &Spanned<T>) -> (usize, usize) {
    s.span().start().map_or((1, 1), |m| (m.line(), m.column()))
}

pub fn load<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, Failure> {
    let opts = marked_yaml::LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    if let Some((line, column)) = cordon_policy::canon::yaml_too_deep(text) {
        return Err(Failure {
            syntax: true,
            line,
            column,
            message: format!(
                "collections nest deeper than {} levels here; flatten the file",
                cordon_policy::canon::MAX_YAML_NESTING
            ),
        });
    }
    let node = marked_yaml::parse_yaml_with_options(0, text, opts).map_err(|e| syntax(&e))?;
    marked_yaml::from_node(&node).map_err(|e| {
        let (line, column) = e.start_mark().map_or((1, 1), |m| (m.line(), m.column()));
        let message = match &*e {
            marked_yaml::Error::UnknownFieldError(field, expected, _) => {
                let expected: Vec<String> = expected.iter().map(|f| format!("`{f}`")).collect();
                format!(
                    "unknown field `{field}`; the fields here are {}",
                    expected.join(", ")
                )
            }
            marked_yaml::Error::NotBoolean(_) => "expected `true` or `false`".to_string(),
            other => {
                let text = lowercase_first(&other.to_string());
                if text.starts_with("missing field") {
                    format!("{text}; add it")
                } else {
                    format!("{text}; write the value in the documented form")
                }
            }
        };
        Failure {
            syntax: false,
            line,
            column,
            message,
        }
    })
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

fn syntax(e: &marked_yaml::LoadError) -> Failure {
    use marked_yaml::LoadError as E;
    let (m, message) = match e {
        E::TopLevelMustBeMapping(m) => (Some(*m), "the document must be a mapping".to_string()),
        E::TopLevelMustBeSequence(m) => (Some(*m), "unexpected top-level sequence".to_string()),
        E::UnexpectedAnchor(m) => (
            Some(*m),
            "YAML anchors and aliases are not accepted".to_string(),
        ),
        E::MappingKeyMustBeScalar(m) => {
            (Some(*m), "a mapping key must be a plain string".to_string())
        }
        E::UnexpectedTag(m) => (Some(*m), "YAML tags are not accepted".to_string()),
        E::ScanError(m, s) => (Some(*m), format!("invalid YAML: {s}")),
        E::DuplicateKey(d) => (
            d.key.span().start().copied(),
            format!("duplicate key `{}`", d.key.as_str()),
        ),
    };
    let (line, column) = m.map_or((1, 1), |m| (m.line(), m.column()));
    Failure {
        syntax: true,
        line,
        column,
        message,
    }
}
