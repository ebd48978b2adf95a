//! Why a benchmark could not run: one error for every bench, a leaf every module may use.

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(String);

impl BenchError {
    /// An error saying `why`.
    pub fn new(why: impl Into<String>) -> BenchError {
        BenchError(why.into())
    }
}
