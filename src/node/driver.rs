//! The driver: runs `Attempt`s (`attempt.rs`), sends what they ask, and parks them between
//! turns, so that a worker never waits on a node.
//!
//! A parked attempt holds no thread. Its requests' replies are routed on the NATS
//! reader thread into the attempt's inbox (bounded per request: what does not fit is
//! dropped and told to the attempt, which treats it as a contest), and its next
//! deadline sits in the timer thread's heap. When either has something for it, the
//! attempt is put on the ready channel, once however much arrives; a worker takes it,
//! decodes what arrived, hands it to the attempt and does what the attempt asks:
//! sends requests, runs the helper (workers are the helper concurrency, as in Go),
//! and parks it again until its next wake.
//!
//! # The contract
//!
//! One attempt is a `Cell`, with one lock over its `Phase` and its `Inbox` (what
//! arrived for it: replies, probes' answers, sends that failed, the timer's wake).
//! The attempt itself (`Parked`) is a value that is moved, never shared: it is in
//! the phase or in one worker's hands, never both. The phases, and what moves a cell
//! between them:
//!
//! | phase | the attempt is | on the ready channel | moved on by |
//! |---|---|---|---|
//! | `Running` | in a worker's hands | no | the worker: `Cell::park` (to `Parked`, unless the inbox has something) or `Driver::end` (to `Ended`) |
//! | `Parked` | in the phase | no | a reply, a probe's answer or the timer: `Cell::schedule` (to `Ready`) |
//! | `Ready` | in the phase | once | a worker takes its `Ready` off the channel: `Cell::take_ready` (to `Running`) |
//! | `Ended` | gone | no (a stale `Ready` or wake finds nothing to take) | — |
//!
//! Invariants, and why they hold:
//! - **A cell runs on one worker at a time.** Only `take_ready` hands the attempt
//!   to a worker, and only out of `Ready`; a `Ready` is sent only when `schedule`
//!   moves the cell from `Parked` to `Ready`, and the attempt is moved out of the
//!   phase as it is handed over, so a second `Ready` cannot exist and a second
//!   worker would find nothing (the compiler holds the attempt to one owner).
//! - **A reply is never lost.** `routed` pushes it and calls `schedule` under the
//!   cell's lock; a worker parks only under that same lock after finding the inbox
//!   empty (`Cell::park`), so a reply either is seen by the running worker or
//!   schedules the parked cell.
//! - **A woken cell runs once per wake.** The timer sets `woken` and schedules
//!   under the cell's lock; the worker takes `woken` (and turns it into one `Tick`)
//!   under the same lock; a wake replaced by a later one is skipped.
//! - **An ended cell frees its routes.** `end` marks it `Ended` (the timer drops its
//!   wakes), drops its routes (no reply reaches it any more) and removes it from
//!   `cells`.
//!
//! `intake_tests` and `contract_tests` (a seeded stress test of replies, wakes and
//! workers racing, run longer by `make stress`) check them.
//!
//! Bounds: at most `max_waiting_attempts` attempts are parked at once (the workers
//! take no new node from the queue meanwhile, so the 50,000-entry queue keeps
//! waiting nodes; each worker checks before it takes one, so the count may pass the
//! bound by one per worker), and at most a quarter of them may be silent ones (no valid reply
//! yet, a try timed out): a silent attempt past that is given up at once, so a flood
//! of made-up identities costs counted memory and never the place of a node that
//! answers.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

use super::attempt::{Attempt, Effect, Incoming, Input, Tag};
use super::outcome::Outcome;
use super::progress::Progress;
use super::sequence::NodeSequence;
use crate::budget::{ByteBudget, Charge};
use crate::choria::identity::Identity;
use crate::choria::protocol::mcorpc::RequestData;
use crate::choria::router::{Route, Routed};
use crate::choria::rpc::RpcClient;

/// Replies kept unread per request: the real one plus a few forged or duplicated.
const REPLIES_PER_REQUEST: usize = 8;

/// What a routed reply may cost, shared by every cell: the per-reply cap
/// (`max_reply_bytes`) and the byte budget (`max_held_bytes`).
///
/// A reply over the cap is dropped unread, as if lost: the request times out and is
/// tried again, so a forger cannot contest it that way, and an honest node whose
/// reply is larger fails with a timeout and the counter says why. Within the cap a
/// request's first reply may fill the budget and a further one half of it. A first
/// reply the budget cannot take is lost the same way (the node answers the retry);
/// a further one is dropped like one past [`REPLIES_PER_REQUEST`]: the attempt is
/// told, and treats it as a contest. So traffic to other attempts never makes an
/// honest attempt contested, and a flood of duplicates never keeps a first reply out.
struct Intake {
    budget: Arc<ByteBudget>,
    max_reply: usize,
    too_large: prometheus::IntCounter,
    over_budget: prometheus::IntCounter,
}

/// An attempt the fleet started, with what the fleet needs back when it ends.
pub struct Ticket {
    /// The node.
    pub identity: Identity,
    /// The fleet's generation of the node's entry.
    pub generation: u64,
    /// When the node was queued (or last seen while queued).
    pub since: Instant,
    /// When the attempt began.
    pub started: Instant,
    /// Where the attempt is and what it learnt, shown on `/nodes`.
    pub progress: Arc<Progress>,
}

/// An attempt that ended.
pub struct Finished {
    /// Its ticket.
    pub ticket: Ticket,
    /// How it ended.
    pub outcome: Outcome,
    /// It ended without a single valid reply from the node (a silent identity).
    pub silent: bool,
}

/// A parked attempt with something to do, for a worker to `Driver::resume`.
pub struct Ready(Arc<Cell>);

/// One attempt, shared with its routes and the timer.
struct Cell {
    /// The driver's key for it.
    id: u64,
    /// Its phase and its inbox, under the cell's one lock.
    state: Mutex<CellState>,
    ready: Sender<Ready>,
    intake: Arc<Intake>,
}

/// What the cell's lock guards.
struct CellState {
    phase: Phase,
    inbox: Inbox,
}

/// Where a cell is (the table in the module doc).
enum Phase {
    /// A worker runs the attempt; what arrives meanwhile waits in the inbox.
    Running,
    /// Parked with nothing to do.
    Parked(Parked),
    /// Parked with something to do: its `Ready` is on the channel, once.
    Ready(Parked),
    /// The attempt ended.
    Ended,
}

impl Phase {
    /// `Parked` becomes `Ready`; true when it did (the caller sends the `Ready`).
    fn make_ready(&mut self) -> bool {
        match std::mem::replace(self, Phase::Ended) {
            Phase::Parked(parked) => {
                *self = Phase::Ready(parked);
                true
            }
            other => {
                *self = other;
                false
            }
        }
    }

    /// The attempt, out of `Ready` (or, when `also_parked`, out of `Parked` too),
    /// for a worker to run: the phase becomes `Running`.
    fn take(&mut self, also_parked: bool) -> Option<Parked> {
        match std::mem::replace(self, Phase::Running) {
            Phase::Ready(parked) => Some(parked),
            Phase::Parked(parked) if also_parked => Some(parked),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// An attempt between turns.
struct Parked {
    ticket: Ticket,
    attempt: Attempt,
    /// The request id of each tag, in order.
    ids: Vec<String>,
    /// The routes of its requests and probes: replies are watched while they live.
    routes: Vec<Route>,
    /// Counted among the silent attempts.
    silent: bool,
}

#[derive(Default)]
struct Inbox {
    /// Each reply with its bytes held against the budget until it is read.
    items: VecDeque<(Tag, Routed, Option<Charge>)>,
    /// Per tag: unread replies and replies dropped since the last look.
    counts: Vec<(usize, u64)>,
    /// Per tag: whether a reply (or "no responders") was ever routed to it.
    answered: Vec<bool>,
    probed: Vec<(Tag, bool)>,
    unsent: Vec<(Tag, String)>,
    woken: bool,
    /// When the timer should wake it.
    wake: Option<Instant>,
}

impl Inbox {
    /// Nothing for a worker to look at.
    fn is_empty(&self) -> bool {
        self.items.is_empty() && self.probed.is_empty() && !self.woken
    }
}

impl Cell {
    /// Puts a parked attempt on the ready channel; one that is there already,
    /// running or ended finds what arrived in its inbox when it next looks.
    fn schedule(self: &Arc<Cell>, state: &mut CellState) {
        if state.phase.make_ready() {
            let _ = self.ready.send(Ready(Arc::clone(self)));
        }
    }

    /// Parks the attempt unless something arrived since the worker last looked, in
    /// which case it is handed back to go on.
    fn park(&self, parked: Parked) -> Option<Parked> {
        let mut state = self.state.lock();
        if state.inbox.is_empty() {
            state.phase = Phase::Parked(parked);
            None
        } else {
            Some(parked)
        }
    }

    /// The attempt, for the worker that took the cell's `Ready`.
    fn take_ready(&self) -> Option<Parked> {
        self.state.lock().phase.take(false)
    }

    /// The timer's wake due at `at`: marks the cell woken and schedules it, unless a
    /// later wake replaced this one or the attempt ended.
    fn wake(self: &Arc<Cell>, at: Instant) {
        let mut state = self.state.lock();
        if matches!(state.phase, Phase::Ended) || state.inbox.wake.is_some_and(|w| w > at) {
            return;
        }
        state.inbox.wake = None;
        state.inbox.woken = true;
        self.schedule(&mut state);
    }

    /// Called on the reader thread for a message routed to `tag`; false when it was
    /// dropped (more unread than a request keeps).
    fn routed(self: &Arc<Cell>, tag: Tag, routed: Routed) -> bool {
        let intake = &self.intake;
        let size = match &routed {
            Routed::Reply(bytes) => bytes.len(),
            Routed::NoResponders => 0,
        };
        if size > intake.max_reply {
            // As if lost: the request's timeout and retry take care of it.
            intake.too_large.inc();
            return true;
        }
        let mut state = self.state.lock();
        let inbox = &mut state.inbox;
        let index = tag as usize;
        if inbox.counts.len() <= index {
            inbox.counts.resize(index + 1, (0, 0));
            inbox.answered.resize(index + 1, false);
        }
        let first = !std::mem::replace(&mut inbox.answered[index], true);
        let ceiling = if first {
            intake.budget.limit()
        } else {
            intake.budget.limit() / 2
        };
        let charge = intake.budget.try_charge(size, ceiling);
        if charge.is_none() {
            intake.over_budget.inc();
            if first {
                // Lost, not contested: the node answers the retry.
                inbox.answered[index] = false;
                return true;
            }
        }
        let (unread, dropped) = &mut inbox.counts[index];
        let kept = charge.is_some() && *unread < REPLIES_PER_REQUEST;
        if kept {
            *unread += 1;
            inbox.items.push_back((tag, routed, charge));
        } else {
            *dropped += 1;
        }
        self.schedule(&mut state);
        kept
    }
}

/// Every parked or running attempt by its id: what keeps a parked one alive (its
/// routes know it weakly, the timer by id).
type Cells = Mutex<HashMap<u64, Arc<Cell>>>;

/// Runs attempts for one provisioner.
pub(crate) struct Driver {
    seq: Arc<NodeSequence>,
    rpc: Arc<RpcClient>,
    ready_tx: Sender<Ready>,
    ready_rx: Receiver<Ready>,
    timer: Arc<Timer>,
    cells: Arc<Cells>,
    next_id: AtomicU64,
    waiting: AtomicUsize,
    silent: AtomicUsize,
    max_waiting: usize,
    intake: Arc<Intake>,
}

impl Driver {
    /// A driver of `seq`'s attempts over `rpc`, with its timer thread (which ends
    /// when the driver is dropped).
    pub(crate) fn new(seq: Arc<NodeSequence>, rpc: Arc<RpcClient>) -> std::io::Result<Arc<Driver>> {
        let (ready_tx, ready_rx) = unbounded();
        let cells = Arc::new(Cells::default());
        let timer = Timer::start(Arc::clone(&cells))?;
        let max_waiting = seq.config().max_waiting_attempts;
        let rejected = &seq.metrics().rejected_replies;
        let intake = Arc::new(Intake {
            budget: Arc::clone(seq.budget()),
            max_reply: usize::try_from(seq.config().max_reply_bytes).unwrap_or(usize::MAX),
            too_large: rejected.with_label_values(&["too_large"]),
            over_budget: rejected.with_label_values(&["over_budget"]),
        });
        Ok(Arc::new(Driver {
            intake,
            seq,
            rpc,
            ready_tx,
            ready_rx,
            timer,
            cells,
            next_id: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            silent: AtomicUsize::new(0),
            max_waiting,
        }))
    }

    /// The shared part of every attempt.
    pub(crate) fn sequence(&self) -> &Arc<NodeSequence> {
        &self.seq
    }

    /// Parked attempts with something to do.
    pub(crate) fn ready(&self) -> Receiver<Ready> {
        self.ready_rx.clone()
    }

    /// Whether another attempt may begin: fewer than `max_waiting_attempts` wait.
    pub(crate) fn has_room(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) < self.max_waiting
    }

    /// Attempts parked or running now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Begins an attempt; `Some` when it ended without waiting on the node.
    pub(crate) fn begin(&self, ticket: Ticket, stopping: &AtomicBool) -> Option<Finished> {
        let attempt = Attempt::new(
            ticket.identity.clone(),
            ticket.since,
            Arc::clone(&ticket.progress),
        );
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(Cell {
            id,
            state: Mutex::new(CellState {
                phase: Phase::Running,
                inbox: Inbox::default(),
            }),
            ready: self.ready_tx.clone(),
            intake: Arc::clone(&self.intake),
        });
        self.cells.lock().insert(id, Arc::clone(&cell));
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.update_gauges();
        let parked = Parked {
            ticket,
            attempt,
            ids: Vec::new(),
            routes: Vec::new(),
            silent: false,
        };
        self.turns(&cell, parked, vec![Input::Start], stopping)
    }

    /// Runs a parked attempt that has something to do.
    pub(crate) fn resume(&self, ready: Ready, stopping: &AtomicBool) -> Option<Finished> {
        let cell = ready.0;
        let parked = cell.take_ready()?;
        self.turns(&cell, parked, Vec::new(), stopping)
    }

    /// Ends every parked attempt (the daemon is stopping); running ones end at their
    /// next turn.
    pub(crate) fn abandon_all(&self) -> Vec<Finished> {
        let cells: Vec<Arc<Cell>> = self.cells.lock().drain().map(|(_, c)| c).collect();
        let stopping = AtomicBool::new(true);
        cells
            .into_iter()
            .filter_map(|cell| {
                let parked = cell.state.lock().phase.take(true)?;
                self.turns(&cell, parked, vec![Input::Stop], &stopping)
            })
            .collect()
    }

    /// Hands the attempt what arrived, and `inputs`, until nothing is left; then
    /// parks it or, when it ended, returns how.
    fn turns(
        &self,
        cell: &Arc<Cell>,
        mut parked: Parked,
        mut inputs: Vec<Input>,
        stopping: &AtomicBool,
    ) -> Option<Finished> {
        loop {
            self.collect(cell, &mut parked, &mut inputs);
            if stopping.load(Ordering::Relaxed) {
                inputs.push(Input::Stop);
            }
            if inputs.is_empty() {
                match cell.park(parked) {
                    None => return None,
                    Some(back) => {
                        parked = back;
                        continue;
                    }
                }
            }
            let batch = std::mem::take(&mut inputs);
            if let Some(outcome) = self.turn(cell, &mut parked, batch, stopping) {
                return Some(self.end(cell, parked, outcome));
            }
        }
    }

    /// What arrived since the last look, as inputs.
    fn collect(&self, cell: &Cell, parked: &mut Parked, inputs: &mut Vec<Input>) {
        let mut state = cell.state.lock();
        let inbox = &mut state.inbox;
        let items: Vec<(Tag, Routed, Option<Charge>)> = inbox.items.drain(..).collect();
        let probed: Vec<(Tag, bool)> = inbox.probed.drain(..).collect();
        let unsent: Vec<(Tag, String)> = inbox.unsent.drain(..).collect();
        let mut dropped = Vec::new();
        for (tag, (unread, lost)) in inbox.counts.iter_mut().enumerate() {
            *unread = 0;
            if *lost > 0 {
                dropped.push((tag as Tag, std::mem::take(lost)));
            }
        }
        let woken = std::mem::take(&mut inbox.woken);
        drop(state);
        let identity = parked.attempt.identity().clone();
        for (tag, routed, charge) in items {
            let incoming = match routed {
                Routed::NoResponders => Incoming::NoResponders,
                Routed::Reply(bytes) => {
                    let id = parked.ids.get(tag as usize).map_or("", String::as_str);
                    match self.rpc.accept(&bytes, id, &identity) {
                        Ok((reply, body)) => Incoming::Reply(reply, body),
                        Err(why) => {
                            log::debug!("Rejected a reply for {identity}: {}", why.detail);
                            Incoming::Rejected {
                                reason: why.reason,
                                detail: why.detail,
                            }
                        }
                    }
                }
            };
            // Read: its bytes are given back to the budget.
            drop(charge);
            inputs.push(Input::Reply { tag, incoming });
        }
        for (tag, nobody) in probed {
            inputs.push(Input::Reply {
                tag,
                incoming: Incoming::Probed { nobody },
            });
        }
        for (tag, why) in unsent {
            inputs.push(Input::Reply {
                tag,
                incoming: Incoming::Unsent(why),
            });
        }
        for (tag, n) in dropped {
            inputs.push(Input::Reply {
                tag,
                incoming: Incoming::Dropped(n),
            });
        }
        // Last: every reply that is there is read before a deadline is judged.
        if woken {
            inputs.push(Input::Tick);
        }
    }

    /// The attempt's turn with `inputs`, and its effects (the helper's result is the
    /// next turn's input). `Some` when it ended.
    fn turn(
        &self,
        cell: &Arc<Cell>,
        parked: &mut Parked,
        inputs: Vec<Input>,
        stopping: &AtomicBool,
    ) -> Option<Outcome> {
        let mut next = Some(inputs);
        while let Some(inputs) = next.take() {
            let paused = self.seq.pause().paused();
            let turn = match catch_unwind(AssertUnwindSafe(|| {
                parked
                    .attempt
                    .handle(&self.seq, inputs, Instant::now(), paused)
            })) {
                Ok(turn) => turn,
                Err(payload) => return Some(panicked(&parked.ticket.identity, payload.as_ref())),
            };
            for effect in turn.effects {
                match effect {
                    Effect::Send(request) => self.send(cell, parked, request),
                    Effect::Probe(tag) => self.probe(cell, parked, tag),
                    Effect::RunHelper(input) => {
                        let ran = self.run_helper(parked, &input, stopping);
                        next = Some(vec![Input::Helper(ran)]);
                    }
                }
            }
            if let Some(outcome) = turn.done {
                return Some(outcome);
            }
            if let Some(outcome) = self.mark_silent(parked) {
                return Some(outcome);
            }
            if let Some(at) = turn.wake {
                let mut state = cell.state.lock();
                if state.inbox.wake != Some(at) {
                    state.inbox.wake = Some(at);
                    drop(state);
                    self.timer.schedule(at, cell.id);
                }
            }
        }
        None
    }

    /// Counts the attempt among the silent ones once a try timed out with nothing
    /// from the node; past their bound (a quarter of `max_waiting_attempts`) it is
    /// given up at once, and the fleet keeps the identity for a growing cool-down.
    fn mark_silent(&self, parked: &mut Parked) -> Option<Outcome> {
        if parked.silent || parked.attempt.answered() || !parked.attempt.timed_out() {
            return None;
        }
        let bound = (self.max_waiting / 4).max(1);
        if self.silent.load(Ordering::Relaxed) >= bound {
            self.seq.metrics().silent_given_up.inc();
            return Some(Outcome::Failed(format!(
                "gave up on {}: it did not answer, and {bound} attempts already wait on \
                 silent nodes (a quarter of max_waiting_attempts)",
                parked.ticket.identity
            )));
        }
        parked.silent = true;
        self.silent.fetch_add(1, Ordering::Relaxed);
        self.update_gauges();
        None
    }

    fn send(&self, cell: &Arc<Cell>, parked: &mut Parked, request: super::attempt::Request) {
        let tag = request.tag;
        let weak = Arc::downgrade(cell);
        let sink = Arc::new(move |routed: Routed| {
            weak.upgrade().is_none_or(|cell| cell.routed(tag, routed))
        });
        let sent = self.rpc.send_routed(
            parked.attempt.identity(),
            request.agent,
            request.action,
            &Raw(&request.data),
            request.flush,
            sink,
        );
        match sent {
            Ok((id, route)) => {
                if parked.ids.len() <= tag as usize {
                    parked.ids.resize(tag as usize + 1, String::new());
                }
                parked.ids[tag as usize] = id;
                parked.routes.push(route);
            }
            Err(e) => {
                // Told as a try that failed; the attempt retries it.
                let mut state = cell.state.lock();
                state.inbox.unsent.push((tag, e.to_string()));
                state.inbox.woken = true;
            }
        }
    }

    fn probe(&self, cell: &Arc<Cell>, parked: &mut Parked, tag: Tag) {
        let weak = Arc::downgrade(cell);
        let told = Box::new(move |nobody: bool| {
            if let Some(cell) = weak.upgrade() {
                let mut state = cell.state.lock();
                state.inbox.probed.push((tag, nobody));
                cell.schedule(&mut state);
            }
        });
        match self.rpc.probe(parked.attempt.identity(), told) {
            Ok(route) => parked.routes.push(route),
            Err(e) => {
                // Without a probe the status is believed, as it was before probes.
                log::debug!("Could not probe {}: {e}", parked.attempt.identity());
                cell.state.lock().inbox.probed.push((tag, true));
            }
        }
    }

    fn run_helper(
        &self,
        parked: &Parked,
        input: &[u8],
        stopping: &AtomicBool,
    ) -> Result<super::helper::HelperOutput, super::helper::HelperError> {
        let seq = &self.seq;
        let started = Instant::now();
        let secrets = parked.attempt.secrets(seq);
        let result = seq.helper().run(
            parked.attempt.identity(),
            input,
            seq.pause().paused(),
            &secrets,
            Some(stopping),
        );
        seq.metrics()
            .observe_helper(started.elapsed().as_secs_f64());
        result.map(|run| run.output)
    }

    fn end(&self, cell: &Cell, parked: Parked, outcome: Outcome) -> Finished {
        cell.state.lock().phase = Phase::Ended;
        self.cells.lock().remove(&cell.id);
        let silent = !parked.attempt.answered();
        if parked.silent {
            self.silent.fetch_sub(1, Ordering::Relaxed);
        }
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.update_gauges();
        // Dropping the routes stops watching the node's replies.
        drop(parked.routes);
        Finished {
            ticket: parked.ticket,
            outcome,
            silent,
        }
    }

    fn update_gauges(&self) {
        let metrics = self.seq.metrics();
        let waiting = self.waiting.load(Ordering::Relaxed) as i64;
        metrics.waiting_attempts.set(waiting);
        if waiting > metrics.waiting_attempts_max.get() {
            metrics.waiting_attempts_max.set(waiting);
        }
        metrics
            .silent_attempts
            .set(self.silent.load(Ordering::Relaxed) as i64);
    }
}

/// Request data already written as Go writes it.
struct Raw<'a>(&'a [u8]);

impl RequestData for Raw<'_> {
    fn write_go(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.timer.stop();
    }
}

/// Most characters of a panic message kept in the outcome.
const PANIC_MESSAGE_MAX: usize = 500;

/// The outcome of an attempt that panicked, with the panic message (a `&str` or
/// `String` payload, as `panic!` makes; anything else is named as such).
pub(crate) fn panicked(identity: &str, payload: &(dyn std::any::Any + Send)) -> Outcome {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    let mut shown: String = message.chars().take(PANIC_MESSAGE_MAX).collect();
    if shown.len() < message.len() {
        shown.push_str("...");
    }
    Outcome::Failed(format!(
        "provisioning {identity} panicked: {}",
        shown.escape_debug()
    ))
}

mod timer;
use timer::Timer;

#[cfg(test)]
mod tests;
