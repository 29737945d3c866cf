//! Caps on what crosses out of a sandbox, shared by host-tool responses and
//! (next) declared outputs.

/// All three fields bound a collection: a byte ceiling alone does not, since
/// ten thousand items one byte under the per-item cap cost what the cap was
/// written to prevent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferLimits {
    /// The largest single item (a file, a tool response), in bytes.
    pub max_bytes_per_file: u64,
    /// The most bytes across the whole collection (a run, a collection of outputs).
    pub max_total_bytes: u64,
    /// The most items in the collection.
    pub max_files: u64,
}

impl TransferLimits {
    /// 1 MiB per item, 8 MiB in all, 64 items.
    pub const DEFAULT: TransferLimits = TransferLimits {
        max_bytes_per_file: 1 << 20,
        max_total_bytes: 8 << 20,
        max_files: 64,
    };
}

impl Default for TransferLimits {
    fn default() -> TransferLimits {
        TransferLimits::DEFAULT
    }
}
