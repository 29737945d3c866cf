//! TEMPORARY: the inspection API the egress proxy is built against, until
//! the policy's `egress.inspect` lands (branch policy-inspect).

use std::sync::Arc;

use crate::policy::Policy;

/// One inspected host entry.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub host: String,
    pub roots_pem: Option<Arc<str>>,
    pub file: Arc<str>,
    pub line: usize,
}

impl Policy {
    pub fn inspection(&self, host: &str) -> Option<&Inspection> {
        self.inspect.iter().find(|i| match i.host.strip_prefix("*.") {
            Some(s) => host.len() > s.len() + 1 && host.ends_with(&format!(".{s}")),
            None => i.host == host,
        })
    }
    pub fn inspects_any(&self) -> bool {
        !self.inspect.is_empty()
    }
}
