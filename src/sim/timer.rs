//! One thread that runs delayed work for the whole simulator (slow replies,
//! restarts), ordered by due time in a min-heap.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send>;

/// The delayed-work thread.
pub struct Timer {
    tx: Sender<(Instant, Job)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Timer {
    /// Starts the thread; it ends when `stopped` disconnects.
    pub fn start(stopped: Receiver<()>) -> Timer {
        let (tx, rx) = unbounded::<(Instant, Job)>();
        let thread = std::thread::Builder::new()
            .name("sim-timer".into())
            .spawn(move || run(&rx, &stopped))
            .expect("spawn timer thread");
        Timer {
            tx,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Runs `job` after `delay`.
    pub fn after(&self, delay: Duration, job: impl FnOnce() + Send + 'static) {
        let _ = self.tx.send((Instant::now() + delay, Box::new(job)));
    }

    /// Waits for the thread to end.
    pub fn join(&self) {
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

fn run(rx: &Receiver<(Instant, Job)>, stopped: &Receiver<()>) {
    let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut jobs: HashMap<u64, Job> = HashMap::new();
    let mut seq = 0u64;
    loop {
        let wait = heap
            .peek()
            .map(|Reverse((at, _))| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        select! {
            recv(rx) -> item => match item {
                Ok((at, job)) => {
                    seq += 1;
                    heap.push(Reverse((at, seq)));
                    jobs.insert(seq, job);
                }
                Err(_) => return,
            },
            recv(stopped) -> _ => return,
            default(wait) => {}
        }
        let now = Instant::now();
        while heap.peek().is_some_and(|Reverse((at, _))| *at <= now) {
            if let Some(Reverse((_, id))) = heap.pop() {
                if let Some(job) = jobs.remove(&id) {
                    job();
                }
            }
        }
    }
}
