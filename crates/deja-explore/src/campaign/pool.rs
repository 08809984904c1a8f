//! The workers: threads that each own one fork and take the inputs of the batches handed to
//! them, slot by slot; what they send back is tagged with its batch and slot.

use super::*;

/// A batch of inputs the workers share: each takes the next one not taken.
pub(super) struct Batch<I> {
    /// Its number in this invocation.
    pub(super) id: u64,
    pub(super) inputs: Vec<I>,
    pub(super) next: AtomicUsize,
}

impl<I> Batch<I> {
    /// No worker takes another input of it (one running finishes).
    pub(super) fn cancel(&self) {
        self.next.store(usize::MAX / 2, Ordering::Relaxed);
    }
}

/// What a worker sends back: (worker, batch, slot, outcome).
pub(super) type Returned<O> = (usize, u64, usize, Result<O, ExploreError>);

/// The workers of a campaign and what they sent back.
pub(super) struct Pool<I, O> {
    pub(super) workers: Vec<mpsc::Sender<Arc<Batch<I>>>>,
    pub(super) returned: mpsc::Receiver<Returned<O>>,
    /// Rounds each worker ran in this invocation.
    pub(super) done_by: Vec<u64>,
    pub(super) next_id: u64,
    /// The batches submitted and not collected, oldest first, with the outcomes back so far.
    pub(super) in_flight: std::collections::VecDeque<InFlight<I, O>>,
}

/// A batch handed to the workers and its outcomes so far (`Err`: no progress, and why).
pub(super) type InFlight<I, O> = (Arc<Batch<I>>, Vec<Option<Result<O, String>>>);

impl<I, O> Pool<I, O> {
    /// Hands `inputs` to the workers, after the batches already submitted.
    pub(super) fn submit(&mut self, inputs: Vec<I>) -> Result<(), ExploreError> {
        let n = inputs.len();
        let batch = Arc::new(Batch { id: self.next_id, inputs, next: AtomicUsize::new(0) });
        self.next_id += 1;
        for w in &self.workers {
            w.send(Arc::clone(&batch)).map_err(|_| stopped())?;
        }
        self.in_flight.push_back((batch, (0..n).map(|_| None).collect()));
        Ok(())
    }

    /// Waits for the oldest batch: its length and its outcomes in the inputs' order (`Err`: the
    /// round made no progress, and why). Outcomes of later batches that come back meanwhile are
    /// kept for them.
    pub(super) fn collect_first(&mut self) -> Result<(usize, Vec<Result<O, String>>), ExploreError> {
        let first = self.in_flight.front().map(|(b, _)| b.id).ok_or_else(stopped)?;
        while self.in_flight.front().is_some_and(|(_, outs)| outs.iter().any(Option::is_none)) {
            let (w, id, slot, out) = self.returned.recv().map_err(|_| stopped())?;
            // A cancelled batch's round that was running when it was cancelled.
            let Some((_, outs)) = self.in_flight.iter_mut().find(|(b, _)| b.id == id) else { continue };
            self.done_by[w] += 1;
            outs[slot] = Some(match out {
                Ok(o) => Ok(o),
                Err(e) => Err(e.no_progress().ok_or(e)?),
            });
        }
        let (batch, outs) = self.in_flight.pop_front().filter(|(b, _)| b.id == first).ok_or_else(stopped)?;
        Ok((batch.inputs.len(), outs.into_iter().flatten().collect()))
    }

    /// Drops every batch not collected; workers finish only the rounds they are running.
    pub(super) fn cancel_all(&mut self) {
        for (b, _) in self.in_flight.drain(..) {
            b.cancel();
        }
    }
}

impl<I: Clone, O> Pool<I, O> {
    /// Submits the planned inputs not submitted yet, an epoch at a time (they are the front of
    /// `pending`, whose first `round` rounds are learned), until `1 + ahead` epochs are in
    /// flight or `--runs` would be passed.
    pub(super) fn submit_pending(
        &mut self,
        pending: &[I],
        round: u64,
        cfg: &CampaignConfig,
        ahead: u64,
    ) -> Result<(), ExploreError> {
        let size = cfg.epoch();
        let mut submitted: usize = self.in_flight.iter().map(|(b, _)| b.inputs.len()).sum();
        while self.in_flight.len() as u64 <= ahead {
            let at = round + submitted as u64;
            let allowed = cfg.runs.map_or(u64::MAX, |n| n.saturating_sub(at));
            let take = (size - at % size).min(allowed).min((pending.len() - submitted) as u64) as usize;
            if take == 0 {
                break;
            }
            self.submit(pending[submitted..submitted + take].to_vec())?;
            submitted += take;
        }
        if self.in_flight.is_empty() {
            return Err(stopped());
        }
        Ok(())
    }
}

pub(super) fn stopped() -> ExploreError {
    ExploreError::WorkerStopped
}

/// A worker: boots its subject's worker on its own thread at the first batch, then runs inputs
/// of each batch until none is left.
pub(super) fn worker_loop<S: Subject>(
    subject: &S,
    reference: &S::Reference,
    strategy: Strategy,
    me: usize,
    batches: &mpsc::Receiver<Arc<Batch<S::Input>>>,
    returned: &mpsc::Sender<Returned<S::Outcome>>,
) {
    let mut worker: Option<Result<S::Worker, String>> = None;
    while let Ok(batch) = batches.recv() {
        loop {
            let slot = batch.next.fetch_add(1, Ordering::Relaxed);
            let Some(input) = batch.inputs.get(slot) else { break };
            let w = worker.get_or_insert_with(|| subject.worker(reference, strategy).map_err(|e| e.to_string()));
            let out = match w {
                Ok(w) => subject.run(w, reference, input),
                Err(e) => Err(ExploreError::WorkerStart { worker: me, why: e.clone() }),
            };
            if returned.send((me, batch.id, slot, out)).is_err() {
                return;
            }
        }
    }
}
