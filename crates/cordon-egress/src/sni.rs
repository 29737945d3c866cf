//! TLS ClientHello reading (placeholder).
