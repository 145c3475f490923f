//! A decision log that keeps every entry the layer writes, for tests that read the records.

use std::sync::{Arc, Mutex};

use mcp_confirm::audit::{DecisionLog, DurableWrite, LogDown, LogEntry, WhenDown};

/// Every entry the layer writes, in order; always healthy, fail-closed.
#[derive(Clone, Default)]
pub struct KeptLog(pub Arc<Mutex<Vec<LogEntry>>>);

impl KeptLog {
    /// The entries so far.
    pub fn entries(&self) -> Vec<LogEntry> {
        self.0.lock().unwrap().clone()
    }
}

impl DecisionLog for KeptLog {
    fn when_down(&self) -> WhenDown {
        WhenDown::FailClosed
    }
    fn is_healthy(&self) -> bool {
        true
    }
    fn append(&self, entry: LogEntry) -> Result<(), LogDown> {
        self.0.lock().unwrap().push(entry);
        Ok(())
    }
    fn append_durable(&self, entry: LogEntry) -> Result<DurableWrite, LogDown> {
        self.0.lock().unwrap().push(entry);
        Ok(Box::pin(std::future::ready(Ok(()))))
    }
}
