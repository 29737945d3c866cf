//! The host ↔ guest channel of the microvm backend.
