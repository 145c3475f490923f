//! The audit events a test produced, recorded from the `mcp_confirm::audit` tracing target.
//!
//! One global subscriber (installed once) hands each event to the recorder of the thread that
//! emitted it. A thread-local default subscriber per test would share tracing's per-callsite
//! interest cache with the other tests of the binary running at the same time, and could miss
//! events; the global one is always interested.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};

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

thread_local! {
    /// Where this thread's audit events go while a test records them.
    static SINK: RefCell<Option<Events>> = const { RefCell::new(None) };
}

/// The global layer: each audit event to its thread's sink, if any.
struct ToThreadSink;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ToThreadSink {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != mcp_confirm::audit::TARGET {
            return;
        }
        SINK.with(|sink| {
            if let Some(events) = &*sink.borrow() {
                let mut fields = Vec::new();
                event.record(&mut Recorded(&mut fields));
                events.0.lock().unwrap().push(fields);
            }
        });
    }
}

/// Stops recording this thread's events when dropped.
pub struct Recording(());

impl Drop for Recording {
    fn drop(&mut self) {
        SINK.with(|sink| *sink.borrow_mut() = None);
    }
}

impl Events {
    /// Records this thread's audit events until the returned guard is dropped.
    pub fn record() -> (Self, Recording) {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            // Another global subscriber (none is set in the suite) would keep this one out.
            let _ = tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(ToThreadSink),
            );
        });
        let events = Self::default();
        SINK.with(|sink| *sink.borrow_mut() = Some(events.clone()));
        (events, Recording(()))
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
