//! Emptied buffers kept for reuse, shared between threads: a few at most,
//! the rest freed. The direct spans' queue keeps its sent batches' buffers
//! (`otlp_trace::queue`) and `direct::SpanBatch` its lists here, so a
//! buffer is not allocated on one thread and freed on another at every
//! batch (issue 24).

use std::sync::Mutex;

/// At most `kept` emptied `Vec<T>`s, none with room for more than
/// `largest` items.
#[derive(Debug)]
pub(crate) struct Spares<T> {
    list: Mutex<Vec<Vec<T>>>,
    kept: usize,
    largest: usize,
}

impl<T> Spares<T> {
    pub(crate) const fn new(kept: usize, largest: usize) -> Spares<T> {
        Spares { list: Mutex::new(Vec::new()), kept, largest }
    }

    /// A kept buffer (empty), if there is one.
    pub(crate) fn take(&self) -> Option<Vec<T>> {
        self.list.lock().ok()?.pop()
    }

    /// Keeps `buffer`, emptied, unless as many as `kept` are kept already
    /// or its room is none or more than `largest`.
    pub(crate) fn give(&self, mut buffer: Vec<T>) {
        buffer.clear();
        if buffer.capacity() == 0 || buffer.capacity() > self.largest {
            return;
        }
        if let Ok(mut list) = self.list.lock()
            && list.len() < self.kept
        {
            list.push(buffer);
        }
    }
}
