//! `state.json`: read (missing is RUNNING, corrupt fails closed) and replaced atomically.

use crate::error::StoreError;
use crate::Store;
use stopline_core::{ControlState, RefusalCode, StateRecord};

impl Store {
    /// Read `state.json`; a missing file is RUNNING, an unparsable one `control_state_corrupt`.
    pub(crate) fn read_state(&self) -> Result<StateRecord, StoreError> {
        match self.read_optional(&self.layout.state())? {
            None => Ok(StateRecord::running()),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("state.json is corrupt: {error}"),
                )
            }),
        }
    }

    /// Write `state.json` atomically.
    pub(crate) fn write_state(
        &self,
        state: ControlState,
        by: &str,
        reason: &str,
        deadline_unix_ms: Option<i64>,
        prepared_before_unix_ms: Option<i64>,
        fp: &str,
    ) -> Result<StateRecord, StoreError> {
        let record = StateRecord {
            state,
            by: by.to_string(),
            reason: reason.to_string(),
            since: crate::env::rfc3339(self.env.now_ms()),
            deadline: deadline_unix_ms.map(crate::env::rfc3339),
            deadline_unix_ms,
            prepared_before_unix_ms,
        };
        let bytes = serde_json::to_vec_pretty(&record).expect("a state record always serializes");
        self.ensure_dirs(&[])?;
        self.replace_atomic(&self.layout.state(), &bytes, fp)?;
        Ok(record)
    }
}
