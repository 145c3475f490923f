//! The audit events a test produced, recorded from the `mcp_confirm::audit` tracing target.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One audit event's fields, as `(name, value)` pairs.
pub type Fields = Vec<(String, String)>;

/// Every audit event seen while the guard of [`Events::record`] lives.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<Fields>>>);

struct Recorded<'a>(&'a mut Fields);

impl Visit for Recorded<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != mcp_confirm::audit::TARGET {
            return;
        }
        let mut fields = Vec::new();
        event.record(&mut Recorded(&mut fields));
        self.0.lock().unwrap().push(fields);
    }
}

impl Events {
    /// Records this thread's audit events until the returned guard is dropped.
    pub fn record() -> (Self, tracing::subscriber::DefaultGuard) {
        let events = Self::default();
        let guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
        (events, guard)
    }

    /// The value of `name` in every event that has it.
    pub fn field(&self, name: &str) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter_map(|e| e.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            .collect()
    }

    /// The events whose field `name` is `value`.
    pub fn with(&self, name: &str, value: &str) -> Vec<Fields> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| e.iter().any(|(k, v)| k == name && v == value))
            .cloned()
            .collect()
    }
}
