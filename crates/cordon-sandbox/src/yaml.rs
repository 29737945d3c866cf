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
                let guess = cordon_policy::vocab::did_you_mean(field, expected.iter().copied());
                let listed: Vec<String> = expected.iter().map(|f| format!("`{f}`")).collect();
                match guess {
                    Some(g) => format!(
                        "unknown field `{field}`: did you mean `{g}`? (the fields here are {})",
                        listed.join(", ")
                    ),
                    None => format!(
                        "unknown field `{field}`; the fields here are {}",
                        listed.join(", ")
                    ),
                }
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

/// Reads a YAML file of at most `max` bytes, refusing anything but a
/// regular file: opened without blocking (a FIFO swapped in after a check
/// cannot hang the reader), checked on the descriptor it reads from, and
/// read with a bound (a file that grows after the check is cut, then
/// refused).
pub fn read_file(path: &std::path::Path, max: u64) -> Result<String, String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let refused = || {
        if max.is_multiple_of(1 << 20) {
            format!("it is not a regular file of at most {} MiB", max >> 20)
        } else {
            format!("it is not a regular file of at most {max} bytes")
        }
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.len() > max {
        return Err(refused());
    }
    let mut text = String::new();
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > max {
        return Err(refused());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::read_file;

    #[test]
    fn only_a_regular_file_within_the_bound_is_read() {
        let dir = tempfile::tempdir().expect("dir");
        let ok = dir.path().join("ok.yaml");
        std::fs::write(&ok, "kind: x\n").expect("write");
        assert_eq!(read_file(&ok, 1 << 20).expect("read"), "kind: x\n");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, "x".repeat(2048)).expect("write");
        assert!(read_file(&big, 1024).is_err(), "over the bound");
        // A FIFO with no writer: refused at once, never a hang.
        let fifo = dir.path().join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let err = read_file(&fifo, 1 << 20).expect_err("a FIFO");
        assert!(err.contains("not a regular file of at most 1 MiB"), "{err}");
        assert!(read_file(dir.path(), 1 << 20).is_err(), "a directory");
    }
}
