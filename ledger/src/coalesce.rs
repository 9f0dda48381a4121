//! Group commit for the Redis ledger's hot calls (issue 24): the leases
//! and the results that arrive while one such call is in flight are sent
//! together, as one script call, once it ends.
//!
//! A script call costs Redis a fixed part whatever its size (the guard,
//! the window, every arm's queue, the counts and the audit entry: about
//! 200 us a lease and 150 us a finish on a 2-core machine) beside its
//! part a run; at a worker's batch of 32 that fixed part was a quarter of
//! a lifecycle's Redis CPU (`cargo bench -p cohort-ledger --bench
//! scripts`, `COHORT_BENCH_BATCH`). Many workers calling at once now share
//! it. A call made while none is in flight is sent at once: gathering
//! never waits for company.
//!
//! A gathered call does what the calls it holds would have done one after
//! the other, in the order they arrived (the scripts take a section per
//! caller: `lua/lease.lua`, `lua/finish.lua`), so nothing a caller sees
//! changes but its timing. It runs on a task of its own, so a caller that
//! gives up (a cancelled request) takes no other caller's answer with it.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::LedgerError;

/// The most runs one gathered call carries: a script blocks Redis while it
/// runs, and 1,000 runs take it about 15 ms.
pub(crate) const MOST_RUNS: usize = 1_000;

/// Calls of one kind waiting to be sent, and whether one is in flight.
pub(crate) struct Gather<Ask, Answer> {
    waiting: Mutex<Vec<Waiting<Ask, Answer>>>,
    /// Held by the task that sends gathered calls, for as long as any wait.
    in_flight: Arc<tokio::sync::Mutex<()>>,
}

struct Waiting<Ask, Answer> {
    ask: Ask,
    /// Runs the call carries, against [`MOST_RUNS`].
    runs: usize,
    answer: oneshot::Sender<Result<Answer, LedgerError>>,
}

impl<Ask, Answer> std::fmt::Debug for Gather<Ask, Answer> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gather").field("waiting", &self.waiting.lock().map(|w| w.len()).unwrap_or(0)).finish()
    }
}

impl<Ask: Send + 'static, Answer: Send + 'static> Gather<Ask, Answer> {
    pub(crate) fn new() -> Gather<Ask, Answer> {
        Gather { waiting: Mutex::new(Vec::new()), in_flight: Arc::new(tokio::sync::Mutex::new(())) }
    }

    /// Sends `ask` (carrying `runs` runs) with the calls waiting beside
    /// it: `send` makes one call of several asks and answers each, in
    /// order. The first caller to find nothing in flight starts a task
    /// that sends what waits, then what waited meanwhile, until nothing
    /// does.
    pub(crate) async fn call<Call, Called>(
        self: &Arc<Self>,
        ask: Ask,
        runs: usize,
        send: Call,
    ) -> Result<Answer, LedgerError>
    where
        Call: Fn(Vec<Ask>) -> Called + Send + 'static,
        Called: Future<Output = Result<Vec<Answer>, LedgerError>> + Send + 'static,
    {
        let (tx, mut answer) = oneshot::channel();
        self.lock().push(Waiting { ask, runs, answer: tx });
        let mut send = Some(send);
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => {
                    return answered.unwrap_or_else(|_| {
                        Err(LedgerError::Corrupt("a gathered ledger call ended without an answer (its task panicked)".into()))
                    });
                }
                guard = self.in_flight.clone().lock_owned() => {
                    // Our ask was sent by the task that held the lock, and its
                    // answer is in: the next turn reads it.
                    if self.lock().is_empty() {
                        continue;
                    }
                    let Some(send) = send.take() else { continue };
                    let gather = Arc::clone(self);
                    tokio::spawn(async move {
                        let _held = guard;
                        loop {
                            let batch = gather.next_batch();
                            if batch.is_empty() {
                                return;
                            }
                            let (asks, answers): (Vec<Ask>, Vec<_>) =
                                batch.into_iter().map(|w| (w.ask, w.answer)).unzip();
                            match send(asks).await {
                                Ok(each) => {
                                    for (tx, a) in answers.into_iter().zip(each) {
                                        // A caller that gave up reads nothing.
                                        let _ = tx.send(Ok(a));
                                    }
                                }
                                Err(e) => {
                                    for tx in answers {
                                        let _ = tx.send(Err(e.clone()));
                                    }
                                }
                            }
                        }
                    });
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Waiting<Ask, Answer>>> {
        // A panic while the list was held leaves it whole: keep using it.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The oldest waiting calls up to [`MOST_RUNS`] runs (one at least).
    fn next_batch(&self) -> Vec<Waiting<Ask, Answer>> {
        let mut waiting = self.lock();
        let mut runs = 0;
        let mut take = 0;
        for w in waiting.iter() {
            if take > 0 && runs + w.runs > MOST_RUNS {
                break;
            }
            runs += w.runs;
            take += 1;
        }
        waiting.drain(..take).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A gathered call that doubles each ask, counting its calls and
    /// holding each for a while, so that asks pile up behind it.
    fn doubler(calls: &Arc<AtomicUsize>, sizes: &Arc<Mutex<Vec<usize>>>) -> Doubler {
        let (calls, sizes) = (Arc::clone(calls), Arc::clone(sizes));
        Box::new(move |asks: Vec<u32>| -> Doubled {
            calls.fetch_add(1, Ordering::SeqCst);
            sizes.lock().unwrap().push(asks.len());
            Box::pin(async move {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                Ok(asks.into_iter().map(|a| a * 2).collect())
            })
        })
    }

    type Doubled = std::pin::Pin<Box<dyn Future<Output = Result<Vec<u32>, LedgerError>> + Send + 'static>>;
    type Doubler = Box<dyn Fn(Vec<u32>) -> Doubled + Send + 'static>;

    #[tokio::test(start_paused = true)]
    async fn asks_made_while_a_call_is_in_flight_go_together_and_each_gets_its_own_answer() {
        let gather = Arc::new(Gather::<u32, u32>::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let spawn = |i: u32| {
            let (gather, send) = (Arc::clone(&gather), doubler(&calls, &sizes));
            tokio::spawn(async move { (i, gather.call(i, 1, send).await.unwrap()) })
        };
        // The first ask is in flight (its call takes 10 ms) when the other
        // 49 are made.
        let mut tasks = vec![spawn(0)];
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        tasks.extend((1..50).map(spawn));
        for t in tasks {
            let (i, answer) = t.await.unwrap();
            assert_eq!(answer, 2 * i);
        }
        // The first went alone; the other 49 waited for it and went in one
        // call.
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(*sizes.lock().unwrap(), vec![1, 49]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_ask_alone_is_sent_at_once() {
        let gather = Arc::new(Gather::<u32, u32>::new());
        let (calls, sizes) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
        let started = tokio::time::Instant::now();
        assert_eq!(gather.call(21, 1, doubler(&calls, &sizes)).await.unwrap(), 42);
        assert_eq!(started.elapsed(), std::time::Duration::from_millis(10), "only the call's own time");
        assert_eq!(gather.call(1, 1, doubler(&calls, &sizes)).await.unwrap(), 2);
        assert_eq!(*sizes.lock().unwrap(), vec![1, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_carries_at_most_the_runs_allowed() {
        let gather = Arc::new(Gather::<u32, u32>::new());
        let (calls, sizes) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
        // Ten asks of 300 runs made at once: three fit a call (900 runs),
        // in the order they were made.
        let tasks: Vec<_> = (0..10u32)
            .map(|i| {
                let (gather, send) = (Arc::clone(&gather), doubler(&calls, &sizes));
                tokio::spawn(async move { gather.call(i, 300, send).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*sizes.lock().unwrap(), vec![3, 3, 3, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_gives_up_takes_no_other_answer_with_it() {
        let gather = Arc::new(Gather::<u32, u32>::new());
        let (calls, sizes) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
        // The first caller starts the sending task, then is cancelled
        // while its call is in flight; the asks behind it are answered.
        let first = {
            let (gather, send) = (Arc::clone(&gather), doubler(&calls, &sizes));
            tokio::spawn(async move { gather.call(1, 1, send).await })
        };
        tokio::task::yield_now().await;
        let others: Vec<_> = (2..6u32)
            .map(|i| {
                let (gather, send) = (Arc::clone(&gather), doubler(&calls, &sizes));
                tokio::spawn(async move { gather.call(i, 1, send).await.unwrap() })
            })
            .collect();
        tokio::task::yield_now().await;
        first.abort();
        for (i, t) in (2..6u32).zip(others) {
            assert_eq!(t.await.unwrap(), 2 * i);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_reaches_every_ask_of_the_call() {
        let gather = Arc::new(Gather::<u32, u32>::new());
        let tasks: Vec<_> = (0..5u32)
            .map(|i| {
                let gather = Arc::clone(&gather);
                tokio::spawn(async move {
                    gather
                        .call(i, 1, |_| async {
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                            Err::<Vec<u32>, _>(LedgerError::NotSeeded)
                        })
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert!(matches!(t.await.unwrap(), Err(LedgerError::NotSeeded)));
        }
    }
}
