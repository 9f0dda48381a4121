//! The direct spans' queue ([`crate::direct`]): each span is written as
//! OTLP bytes into the open batch when it ends, on the thread that ends
//! it, and a full batch goes to the export runtime, which sends it with
//! the same exporter, resource and scope as the SDK's spans.
//!
//! Why not the SDK's batch processor (which the `tracing` spans still go
//! through): a `SpanData` is built of allocations (its attributes, each
//! string value) made on the request's thread and freed on the export
//! thread, moved whole through the processor's channel, then read again
//! to be encoded. At the coordinator's rate (three spans a lifecycle,
//! tens of thousands a second on two cores) that cost about as much as
//! the lifecycle itself (issue 24). Here a span costs its own encoding
//! and a share of one lock: spans that end together (a lease batch's, a
//! report's results) go in under one ([`record_all`]).
//!
//! A batch's buffer is never freed: once its spans are wrapped into a
//! request the export task gives it back ([`recycle`]) and the next batch
//! takes it. A new buffer of a batch's size (hundreds of kilobytes) for
//! every batch was allocated on a request's thread and freed on the export
//! thread, which made glibc lock the request thread's arena and fold its
//! small free chunks together (`malloc_consolidate`): a cost the
//! requests' own small allocations then paid.
//!
//! The same limits as the SDK's processor, read from the same variables
//! (`crate::export::BatchSettings`): a batch of at most
//! `max_export_batch_size` spans, at most `max_queue_size` spans waiting
//! (whole batches; a batch that finds the queue full is dropped and
//! counted, never waited for: a request never blocks on tracing), and a
//! batch not yet full sent after `scheduled_delay`. Shutting down sends
//! what is open and waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::OtlpTraceExporter;
use super::encode::sized_message;
use crate::export::BatchSettings;
use crate::spares::Spares;

/// The process's direct-span queue, set once by the exporting
/// `crate::init` ([`start`]).
static QUEUE: OnceLock<Queue> = OnceLock::new();

#[derive(Debug)]
struct Queue {
    open: Mutex<Batch>,
    /// Emptied buffers of sent batches, for the next batches to fill
    /// (two: the batch being sent while the next one fills).
    spare: Spares<u8>,
    /// Full batches to the export task (bounded: see the module header).
    ship: tokio::sync::mpsc::Sender<Batch>,
    max_spans: usize,
    dropped: AtomicU64,
}

/// Spans written as a run of `ScopeSpans.spans` fields.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) bytes: Vec<u8>,
    pub(crate) spans: usize,
}

/// Whether direct spans are exported (the queue is running).
pub(crate) fn active() -> bool {
    QUEUE.get().is_some()
}

/// Writes spans into the open batch under one lock, each as `len` says
/// its `Span` fields take (None: not a span to write) and `write` writes
/// them, and ships each batch that fills. Nothing when the queue is not
/// running.
pub(crate) fn record_all<T>(spans: &[T], len: impl Fn(&T) -> Option<usize>, write: impl Fn(&mut Vec<u8>, &T)) {
    let Some(queue) = QUEUE.get() else { return };
    let mut full = Vec::new();
    {
        let Ok(mut open) = queue.open.lock() else { return };
        for span in spans {
            let Some(len) = len(span) else { continue };
            sized_message(&mut open.bytes, 2, len, |buf| write(buf, span));
            open.spans += 1;
            if open.spans >= queue.max_spans {
                full.push(queue.replace(&mut open));
            }
        }
    }
    for batch in full {
        queue.send(batch);
    }
}

/// Gives a sent batch's buffer back for a later batch to fill.
pub(crate) fn recycle(batch: Batch) {
    if let Some(queue) = QUEUE.get() {
        queue.spare.give(batch.bytes);
    }
}

impl Queue {
    fn send(&self, batch: Batch) {
        if let Err(e) = self.ship.try_send(batch) {
            self.dropped.fetch_add(e.into_inner().spans as u64, Ordering::Relaxed);
        }
    }

    /// The open batch, if it holds a span.
    fn take_open(&self) -> Option<Batch> {
        let mut open = self.open.lock().ok()?;
        (open.spans > 0).then(|| self.replace(&mut open))
    }

    /// `open`'s spans, leaving it an empty batch with as much room (a
    /// batch grown span by span from nothing is copied a dozen times): a
    /// sent batch's buffer when one is spare.
    fn replace(&self, open: &mut Batch) -> Batch {
        let room = open.bytes.capacity();
        let bytes = self.spare.take().unwrap_or_else(|| Vec::with_capacity(room));
        std::mem::replace(open, Batch { bytes, spans: 0 })
    }
}

/// The handle that stops the queue's export task.
#[derive(Debug)]
pub(crate) struct Running {
    stop: Arc<tokio::sync::Notify>,
    done: std::sync::mpsc::Receiver<()>,
}

/// Starts the queue: its export task on `runtime`, sending each batch
/// with `exporter`. Does nothing (and returns None) when a queue already
/// runs in this process.
pub(crate) fn start(
    runtime: &tokio::runtime::Handle,
    exporter: Arc<OtlpTraceExporter>,
    settings: BatchSettings,
) -> Option<Running> {
    let BatchSettings { max_queue, max_batch, delay } = settings;
    let max_spans = max_batch.max(1);
    let (ship, mut batches) = tokio::sync::mpsc::channel((max_queue / max_spans).max(1));
    let queue = Queue {
        open: Mutex::new(Batch::default()),
        spare: Spares::new(2, usize::MAX),
        ship,
        max_spans,
        dropped: AtomicU64::new(0),
    };
    QUEUE.set(queue).ok()?;
    let queue = QUEUE.get()?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let (done_tx, done) = std::sync::mpsc::channel();
    let stopped = Arc::clone(&stop);
    // Owned through `Running`: `stop` ends it, `done` says it has.
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(delay.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some(batch) = batches.recv() => exporter.export_encoded(batch).await,
                _ = tick.tick() => {
                    if let Some(batch) = queue.take_open() {
                        exporter.export_encoded(batch).await;
                    }
                }
                () = stopped.notified() => break,
            }
        }
        // Shutting down: what waits, then what is open.
        while let Ok(batch) = batches.try_recv() {
            exporter.export_encoded(batch).await;
        }
        if let Some(batch) = queue.take_open() {
            exporter.export_encoded(batch).await;
        }
        let _ = done_tx.send(());
    });
    Some(Running { stop, done })
}

impl Running {
    /// Sends what is waiting and open, waiting at most `timeout`; says
    /// how many spans the full queue dropped, if any.
    pub(crate) fn shutdown(self, timeout: Duration) {
        self.stop.notify_one();
        if self.done.recv_timeout(timeout).is_err() {
            eprintln!("warning: trace export did not finish: the direct spans' last batches were not all sent");
        }
        let dropped = QUEUE.get().map_or(0, |q| q.dropped.load(Ordering::Relaxed));
        if dropped > 0 {
            eprintln!(
                "warning: {dropped} spans were dropped: the trace export queue was full \
                 (OTEL_BSP_MAX_QUEUE_SIZE raises it)"
            );
        }
    }
}
