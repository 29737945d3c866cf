//! Facts written by hand, built into a [`Request`] exactly as the
//! enforcing layer builds one ([`FactsBuilder`]).

use std::collections::BTreeMap;

use crate::canon;
use crate::decide::Destination;
use crate::decide::{
    ComputeFacts, Deployment, EgressFacts, Identity, IngressFacts, Mode, Request, SecretFacts,
    StorageFacts, SurfaceFacts,
};
use crate::expr::{self, MAX_LIST_LEN};
use crate::policy::Policy;
use crate::vocab::{self, Surface};

/// A refusal of one fact: what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactError {
    /// The field it is about (`url`, `identity.attested`, ...), when one.
    pub field: Option<String>,
    pub message: String,
    pub help: Option<String>,
}

impl FactError {
    fn new(field: &str, message: impl Into<String>, help: impl Into<String>) -> FactError {
        FactError {
            field: Some(field.to_string()),
            message: message.into(),
            help: Some(help.into()),
        }
    }
}

impl std::fmt::Display for FactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// The fields each surface's facts take, as a case or the command line
/// spells them.
pub fn surface_fields(s: Surface) -> &'static [&'static str] {
    match s {
        Surface::Egress => &["url", "scheme", "host", "port", "method", "path", "ip"],
        Surface::Compute => &[
            "command",
            "command_target",
            "args",
            "cpu",
            "memory",
            "work_dir",
        ],
        Surface::Storage => &["path", "mode", "bytes", "work_dir"],
        Surface::Secret => &["secret"],
        Surface::Ingress => &["port", "listen"],
    }
}

/// The fields of an ingress case's `caller`.
pub const CALLER_KEYS: &[&str] = &["namespace", "name", "attested"];

/// The fields of a secret case's `destination`.
pub const DESTINATION_KEYS: &[&str] = &["host", "method", "path", "header"];

/// The fields of `identity` a case may state.
pub const IDENTITY_KEYS: &[&str] = &["namespace", "name", "attested", "labels"];

/// Builds one request from hand-written facts. Both the test-file loader and
/// the command line feed it, so both type and canonicalise facts the same way.
#[derive(Debug, Clone)]
pub struct FactsBuilder {
    surface: Surface,
    identity: Identity,
    env: Deployment,
    now: Option<i64>,
    fields: BTreeMap<&'static str, String>,
    args: Option<Vec<String>>,
    headers: Vec<(String, String)>,
    destination: BTreeMap<&'static str, String>,
    caller: Identity,
}

impl FactsBuilder {
    pub fn new(surface: Surface) -> FactsBuilder {
        FactsBuilder {
            surface,
            identity: Identity::default(),
            env: Deployment::default(),
            now: None,
            fields: BTreeMap::new(),
            args: None,
            headers: Vec::new(),
            destination: BTreeMap::new(),
            caller: Identity::default(),
        }
    }

    /// Sets a field of who asks (ingress only): `namespace`, `name` or
    /// `attested`.
    pub fn caller(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        let field = format!("caller.{key}");
        if self.surface != Surface::Ingress {
            return Err(FactError::new(
                &field,
                format!("`caller` is an ingress fact, not a {} one", self.surface),
                "remove it",
            ));
        }
        if !who_field(&mut self.caller, "caller", key, value)? {
            return Err(FactError::new(
                &field,
                format!("unknown caller field `{key}`"),
                vocab::unknown_key_help(key, CALLER_KEYS, "`caller`"),
            ));
        }
        Ok(())
    }

    pub fn surface(&self) -> Surface {
        self.surface
    }

    /// Sets an identity field: `namespace`, `name`, `attested` (`true` or
    /// `false`) or `labels.KEY`.
    pub fn identity(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        if who_field(&mut self.identity, "identity", key, value)? {
            return Ok(());
        }
        match key.strip_prefix("labels.") {
            Some(label) if !label.is_empty() => {
                self.identity
                    .labels
                    .insert(label.to_string(), value.to_string());
            }
            _ => {
                let help = match vocab::did_you_mean(key, IDENTITY_KEYS.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => "identity takes `namespace`, `name`, `attested` and `labels.KEY`"
                        .to_string(),
                };
                return Err(FactError::new(
                    &format!("identity.{key}"),
                    format!("unknown identity field `{key}`"),
                    help,
                ));
            }
        }
        Ok(())
    }

    /// Sets an `env` field (`name`).
    pub fn env(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        match key {
            "name" => {
                self.env.name = value.to_string();
                Ok(())
            }
            k => Err(FactError::new(
                &format!("env.{k}"),
                format!("unknown env field `{k}`"),
                "env takes `name`",
            )),
        }
    }

    /// Sets `now` from an RFC 3339 timestamp.
    pub fn now(&mut self, value: &str) -> Result<(), FactError> {
        match expr::parse_timestamp(value) {
            Some(t) => {
                self.now = Some(t);
                Ok(())
            }
            None => Err(FactError::new(
                "now",
                format!("`{value}` is not a timestamp"),
                "write RFC 3339, e.g. `2026-12-02T10:00:00Z`",
            )),
        }
    }

    /// Sets one of the surface's fields (see [`surface_fields`]); `args` is
    /// set with [`FactsBuilder::arg`].
    pub fn field(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        let known = surface_fields(self.surface);
        match known.iter().find(|k| **k == key && **k != "args") {
            Some(k) => {
                if self.fields.insert(k, value.to_string()).is_some() {
                    return Err(FactError::new(
                        key,
                        format!("`{key}` is given twice"),
                        "give each fact once",
                    ));
                }
                Ok(())
            }
            None => {
                let help = match vocab::did_you_mean(key, known.iter().copied()) {
                    Some(s) => format!("did you mean `{s}`?"),
                    None => format!(
                        "a {} case takes {}",
                        self.surface,
                        known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                Err(FactError::new(
                    key,
                    format!("unknown {} fact `{key}`", self.surface),
                    help,
                ))
            }
        }
    }

    /// Appends one argument (compute only).
    pub fn arg(&mut self, value: &str) -> Result<(), FactError> {
        if self.surface != Surface::Compute {
            return Err(FactError::new(
                "args",
                format!("`args` is a compute fact, not a {} one", self.surface),
                "remove it",
            ));
        }
        let args = self.args.get_or_insert_with(Vec::new);
        if args.len() as u64 >= MAX_LIST_LEN {
            return Err(FactError::new(
                "args",
                format!("more than {MAX_LIST_LEN} arguments"),
                "the enforcing layer refuses a command with more arguments",
            ));
        }
        args.push(value.to_string());
        Ok(())
    }

    /// Appends one request header (egress only), in the order sent; a
    /// repeated name is joined as the proxy joins it.
    pub fn header(&mut self, name: &str, value: &str) -> Result<(), FactError> {
        if self.surface != Surface::Egress {
            return Err(FactError::new(
                "headers",
                format!("`headers` is an egress fact, not a {} one", self.surface),
                "remove it",
            ));
        }
        if self.headers.len() >= canon::MAX_ENTRIES {
            return Err(FactError::new(
                "headers",
                format!("more than {} headers", canon::MAX_ENTRIES),
                "the egress proxy refuses a request with more",
            ));
        }
        self.headers.push((name.to_string(), value.to_string()));
        Ok(())
    }

    /// Sets one field of a secret's `destination` (secret only): `host`,
    /// `method`, `path` or `header`.
    pub fn destination(&mut self, key: &str, value: &str) -> Result<(), FactError> {
        let field = format!("destination.{key}");
        if self.surface != Surface::Secret {
            return Err(FactError::new(
                &field,
                format!("`destination` is a secret fact, not a {} one", self.surface),
                "remove it",
            ));
        }
        let Some(k) = DESTINATION_KEYS.iter().find(|k| **k == key) else {
            return Err(FactError::new(
                &field,
                format!("unknown destination field `{key}`"),
                vocab::unknown_key_help(key, DESTINATION_KEYS, "`destination`"),
            ));
        };
        if self.destination.insert(k, value.to_string()).is_some() {
            return Err(FactError::new(
                &field,
                format!("`{field}` is given twice"),
                "give each fact once",
            ));
        }
        Ok(())
    }

    /// Marks `args` as given (an empty list is a list).
    pub fn args_given(&mut self) {
        self.args.get_or_insert_with(Vec::new);
    }

    /// The request, canonicalised, with the unknowns the enforcing layer
    /// has under `policy`: an `https` request shows its URL, method, path,
    /// query and headers only when the policy inspects its host.
    pub fn build(self, policy: &Policy) -> Result<Request, FactError> {
        let facts = match self.surface {
            Surface::Egress => egress_facts(&self.fields, &self.headers, policy)?,
            Surface::Compute => compute_facts(&self.fields, self.args)?,
            Surface::Storage => storage_facts(&self.fields)?,
            Surface::Secret => secret_facts(&self.fields, &self.destination)?,
            Surface::Ingress => ingress_facts(&self.fields, self.caller)?,
        };
        let now = self.now.unwrap_or_else(now_secs);
        Ok(Request {
            identity: self.identity,
            env: self.env,
            now,
            facts,
        })
    }
}

/// A case's stated facts, by name.
type Fields = BTreeMap<&'static str, String>;

/// A fact that does not canonicalise.
fn canon_err(field: &str, e: canon::CanonError) -> FactError {
    FactError::new(
        field,
        e.to_string(),
        "write it as the workload would send it",
    )
}

/// An egress case: its URL, and what it states beside (scheme, host, port,
/// and where the proxy reads the request — plain http, or https to a host
/// the policy inspects — the method, path and headers), each canonicalised.
fn egress_facts(
    fields: &Fields,
    headers: &[(String, String)],
    policy: &Policy,
) -> Result<SurfaceFacts, FactError> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let raw = get("url").ok_or_else(|| {
        FactError::new(
            "url",
            "an egress case needs `url`",
            "add e.g. `url: https://example.com/`",
        )
    })?;
    let u = canon::url(raw).map_err(|e| canon_err("url", e))?;
    let scheme = match get("scheme") {
        None => u.scheme.clone(),
        Some(s @ ("http" | "https")) => s.to_string(),
        Some(s) => {
            return Err(FactError::new(
                "scheme",
                format!("`{s}` is not an egress scheme"),
                "write `http` or `https`",
            ))
        }
    };
    let host = match get("host") {
        Some(h) => canon::host(h).map_err(|e| canon_err("host", e))?,
        None => u.host.clone(),
    };
    let port = match get("port") {
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => i64::from(n),
            _ => {
                return Err(FactError::new(
                    "port",
                    format!("`{p}` is not a port"),
                    "write a number from 1 to 65535",
                ))
            }
        },
        None => u.port,
    };
    // A tunnel the proxy does not open: what travels inside is unknown.
    let tunnel = scheme == "https" && policy.inspection(&host).is_none();
    if tunnel {
        let stated = ["method", "path"]
            .into_iter()
            .find(|k| get(k).is_some())
            .or((!headers.is_empty()).then_some("headers"));
        if let Some(hidden) = stated {
            return Err(FactError::new(
                hidden,
                format!("an https request's `{hidden}` travels inside the TLS tunnel: the egress proxy does not inspect `{host}`, so it cannot see it and a case cannot state it"),
                format!("remove `{hidden}` (rules that read it are undetermined for this request), name the host in `egress.inspect`, or use an http:// URL"),
            ));
        }
        return Ok(SurfaceFacts::Egress(EgressFacts {
            scheme: Some(scheme),
            host: Some(host),
            port,
            ip: ip_fact(get("ip"))?,
            ..EgressFacts::endpoint(None, 0)
        }));
    }
    let method =
        canon::method(get("method").unwrap_or("GET")).map_err(|e| canon_err("method", e))?;
    let path = match get("path") {
        None => u.path.clone(),
        Some(p) => canon::http_path(p).map_err(|e| canon_err("path", e))?,
    };
    Ok(SurfaceFacts::Egress(EgressFacts {
        url: Some(u.url),
        scheme: Some(scheme),
        host: Some(host),
        port,
        method: Some(method),
        path: Some(path),
        ip: ip_fact(get("ip"))?,
        query: Some(canon::query(raw).map_err(|e| canon_err("url", e))?),
        headers: Some(canon::headers(headers).map_err(|e| canon_err("headers", e))?),
    }))
}

/// A stated `ip`, normalised; unknown when not given.
fn ip_fact(raw: Option<&str>) -> Result<Option<String>, FactError> {
    match raw {
        None => Ok(None),
        Some(raw) => match raw.parse::<std::net::IpAddr>() {
            Ok(a) => Ok(Some(a.to_string())),
            Err(_) => Err(FactError::new(
                "ip",
                format!("`{raw}` is not an IP address"),
                "write e.g. `192.0.2.10`",
            )),
        },
    }
}

/// A compute case: its command (and what it resolves to), arguments, bounds
/// and work dir.
fn compute_facts(fields: &Fields, args: Option<Vec<String>>) -> Result<SurfaceFacts, FactError> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let raw = get("command").ok_or_else(|| {
        FactError::new(
            "command",
            "a compute case needs `command`",
            "add e.g. `command: /usr/bin/python3`",
        )
    })?;
    let command = canon::fs_path(raw).map_err(|e| canon_err("command", e))?;
    let command_target = match get("command_target") {
        Some(t) => canon::fs_path(t).map_err(|e| canon_err("command_target", e))?,
        None => command.clone(),
    };
    let int = |k: &str, v: &str| -> Result<i64, FactError> {
        v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            FactError::new(k, format!("`{v}` is not a whole number"), "write e.g. `60`")
        })
    };
    let cpu = get("cpu").map(|v| int("cpu", v)).transpose()?;
    let memory = match get("memory") {
        None => None,
        Some(v) => {
            let n = canon::size(v).map_err(|e| canon_err("memory", e))?;
            Some(i64::try_from(n).map_err(|_| {
                FactError::new(
                    "memory",
                    format!("`{v}` is too large"),
                    "write a smaller size",
                )
            })?)
        }
    };
    Ok(SurfaceFacts::Compute(ComputeFacts {
        command,
        command_target,
        // The first command of a sandbox is checked with its
        // arguments known; none given is an empty list.
        args: Some(args.unwrap_or_default()),
        cpu,
        memory,
        work_dir: Some(work_dir(get("work_dir"))?),
    }))
}

/// A storage case: its path, mode, size and work dir.
fn storage_facts(fields: &Fields) -> Result<SurfaceFacts, FactError> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let raw = get("path").ok_or_else(|| {
        FactError::new(
            "path",
            "a storage case needs `path`",
            "add e.g. `path: /work/src/main.rs`",
        )
    })?;
    let path = canon::fs_path(raw).map_err(|e| canon_err("path", e))?;
    let mode = match get("mode") {
        None => {
            return Err(FactError::new(
                "mode",
                "a storage case needs `mode`",
                "add `mode: read`, `write` or `execute`",
            ))
        }
        Some(m) => Mode::parse(m).ok_or_else(|| {
            FactError::new(
                "mode",
                format!("`{m}` is not a mode"),
                "write `read`, `write` or `execute`",
            )
        })?,
    };
    let bytes = match get("bytes") {
        None => None,
        Some(v) => Some(
            canon::size(v)
                .ok()
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| {
                    FactError::new(
                        "bytes",
                        format!("`{v}` is not a size"),
                        "write e.g. `4096` or `1MiB`",
                    )
                })?,
        ),
    };
    Ok(SurfaceFacts::Storage(StorageFacts {
        path,
        mode,
        bytes,
        work_dir: Some(work_dir(get("work_dir"))?),
    }))
}

/// A secret case: the secret's name, and where it is being substituted
/// when the case states a `destination` (else unknown, as where it is
/// granted).
fn secret_facts(
    fields: &Fields,
    dest: &BTreeMap<&'static str, String>,
) -> Result<SurfaceFacts, FactError> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let raw = get("secret").ok_or_else(|| {
        FactError::new(
            "secret",
            "a secret case needs `secret: {name: ...}`",
            "add e.g. `secret: {name: team-a/db-password}`",
        )
    })?;
    let name = canon::secret_name(raw).map_err(|e| canon_err("secret", e))?;
    let destination = if dest.is_empty() {
        None
    } else {
        let get = |k: &str| dest.get(k).map(String::as_str);
        let host = get("host").ok_or_else(|| {
            FactError::new(
                "destination.host",
                "a `destination` needs `host`",
                "add e.g. `host: api.example.com`",
            )
        })?;
        let header = match get("header") {
            None => None,
            Some(h) => {
                let one = canon::headers(&[(h.to_string(), String::new())])
                    .map_err(|e| canon_err("destination.header", e))?;
                one.into_keys().next()
            }
        };
        Some(Destination {
            host: canon::host(host).map_err(|e| canon_err("destination.host", e))?,
            method: get("method")
                .map(canon::method)
                .transpose()
                .map_err(|e| canon_err("destination.method", e))?,
            path: get("path")
                .map(canon::http_path)
                .transpose()
                .map_err(|e| canon_err("destination.path", e))?,
            header,
        })
    };
    Ok(SurfaceFacts::Secret(SecretFacts { name, destination }))
}

/// An ingress case: the port (required), where it would listen on the
/// host (default `127.0.0.1`), who asks.
fn ingress_facts(fields: &Fields, caller: Identity) -> Result<SurfaceFacts, FactError> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let p = get("port").ok_or_else(|| {
        FactError::new(
            "port",
            "an ingress case needs `port`",
            "add e.g. `port: 8000`",
        )
    })?;
    let port = match p.parse::<u16>() {
        Ok(n) if n > 0 => i64::from(n),
        _ => {
            return Err(FactError::new(
                "port",
                format!("`{p}` is not a port"),
                "write a number from 1 to 65535",
            ))
        }
    };
    let listen = get("listen").unwrap_or("127.0.0.1").to_string();
    if listen.parse::<std::net::IpAddr>().is_err() {
        return Err(FactError::new(
            "listen",
            format!("`{listen}` is not an IP address"),
            "write the host address to listen on, e.g. `127.0.0.1` or `::1`",
        ));
    }
    Ok(SurfaceFacts::Ingress(IngressFacts {
        port,
        listen,
        caller,
    }))
}

/// The work dir a case runs in: as stated, else [`DEFAULT_WORK_DIR`].
fn work_dir(raw: Option<&str>) -> Result<String, FactError> {
    canon::fs_path(raw.unwrap_or(DEFAULT_WORK_DIR)).map_err(|e| {
        FactError::new(
            "work_dir",
            e.to_string(),
            "write the absolute path the workload sees, e.g. `/workspace`",
        )
    })
}

/// The work dir a test case or `explain` assumes when it states none.
pub const DEFAULT_WORK_DIR: &str = "/workspace";

/// The current time, as the enforcing layer stamps a request.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Sets `who`'s (the `identity`'s or the `caller`'s, as `prefix` says)
/// `namespace`, `name` or `attested` (`true` or `false`); `Ok(false)`: the
/// key is none of these.
fn who_field(who: &mut Identity, prefix: &str, key: &str, value: &str) -> Result<bool, FactError> {
    match key {
        "namespace" => who.namespace = value.to_string(),
        "name" => who.name = value.to_string(),
        "attested" => {
            who.attested = match value {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(FactError::new(
                        &format!("{prefix}.{key}"),
                        format!("`{prefix}.attested` is a bool, not `{value}`"),
                        "write `true` or `false`",
                    ))
                }
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}
