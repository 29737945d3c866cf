//! Address classification (placeholder).
