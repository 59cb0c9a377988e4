//! choria-provisioner: a server whose every client costs at most a fixed amount.
//!
//! Upstream's [`crate::Server`] spawns a thread for every connection it accepts
//! (without bound), reads a request head for as long as the client sends it (without
//! bound), waits for a client for ever, allocates a body's announced length when
//! draining it, and ends its accept loop on the first failed `accept`. A
//! [`GuardedServer`] keeps upstream's parsing and response writing, and adds:
//!
//! - a cap on connections at once ([`Limits::max_connections`]): a new connection
//!   beyond it closes the connection whose current step (its head, or its answer)
//!   began longest ago ([`Refusal::Evicted`]), so whoever holds many idle
//!   connections loses them to whoever connects and asks; connections being closed
//!   still count, up to twice the cap, past which a new one waits up to 100 ms for
//!   one of them to go, then is closed ([`Refusal::Overloaded`]);
//! - a pool of at most twice `max_connections` threads (one for each connection
//!   the table may hold, so that a connection being closed never waits in a queue
//!   behind idle ones), started as needed and kept, that run the handler on the
//!   connection's own thread: a slow client holds its own thread only;
//! - a deadline for each request's head (and small body) and one for its answer,
//!   enforced by a reaper thread that shuts the socket down
//!   ([`Refusal::HeadTimeout`], [`Refusal::WriteTimeout`]): a client that sends or
//!   reads one byte a second is dropped all the same;
//! - a cap on a request's head ([`Limits::max_head_bytes`]: `431` and close) and on
//!   its body (`Content-Length` above [`Limits::max_body_bytes`], or any
//!   `Transfer-Encoding`: `413` and close; nothing is allocated from the announced
//!   length);
//! - an accept loop that outlives failed `accept`s (`EMFILE`, `ENFILE`,
//!   `ECONNABORTED`…): counted, logged at most every 10 s, waited out (5 ms
//!   doubling to 1 s, as Go's `net/http` does) and retried;
//! - a drop that never waits on a client: every connection is shut down and no
//!   thread is joined.

use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::client::ClientConnection;
use crate::connection::{Connection, ListenAddr, Listener};
use crate::util::RefinedTcpStream;
use crate::Request;

/// What one client may cost a [`GuardedServer`].
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections at once being served (twice as many may be open while the
    /// surplus is being closed; as many threads serve them).
    pub max_connections: usize,
    /// A request line and its headers, CRLFs included.
    pub max_head_bytes: usize,
    /// A request body read (and discarded unless the handler reads it); more is `413`.
    pub max_body_bytes: usize,
    /// From a connection's accept, or the end of its last answer, to its next
    /// request's head (and body) read whole.
    pub head_timeout: Duration,
    /// From a request read to its answer written whole.
    pub write_timeout: Duration,
    /// Stack of each serving thread.
    pub thread_stack: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_head_bytes: 8 * 1024,
            max_body_bytes: 1024,
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            thread_stack: 256 * 1024,
        }
    }
}

/// Why a [`GuardedServer`] closed a connection, or failed to take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Closed to make room for a newer connection (the cap was reached).
    Evicted,
    /// Closed at once: twice the cap of connections were open or being closed.
    Overloaded,
    /// The request head was over `max_head_bytes` (`431`).
    HeadTooLarge,
    /// The announced body was over `max_body_bytes`, or chunked (`413`).
    BodyTooLarge,
    /// A request line or header that does not parse (`400`).
    BadRequest,
    /// The head was not read whole within `head_timeout`.
    HeadTimeout,
    /// The answer was not written whole within `write_timeout`.
    WriteTimeout,
    /// `accept` failed (`EMFILE`, `ENFILE`, `ECONNABORTED`…); retried after a pause.
    AcceptFailed,
    /// The client reset the connection before its request was read (before even
    /// its address could be, at times).
    Reset,
}

impl Refusal {
    /// A short name for a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Evicted => "evicted",
            Refusal::Overloaded => "overloaded",
            Refusal::HeadTooLarge => "head_too_large",
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::BadRequest => "bad_request",
            Refusal::HeadTimeout => "head_timeout",
            Refusal::WriteTimeout => "write_timeout",
            Refusal::AcceptFailed => "accept_failed",
            Refusal::Reset => "reset",
        }
    }

    /// Every reason, for registering a metric's series ahead.
    pub const ALL: [Refusal; 9] = [
        Refusal::Evicted,
        Refusal::Overloaded,
        Refusal::HeadTooLarge,
        Refusal::BodyTooLarge,
        Refusal::BadRequest,
        Refusal::HeadTimeout,
        Refusal::WriteTimeout,
        Refusal::AcceptFailed,
        Refusal::Reset,
    ];
}

/// Told of every [`Refusal`]; runs on the server's threads, so it must be quick.
pub type OnRefusal = Arc<dyn Fn(Refusal) + Send + Sync>;

/// Answers one request (by calling [`Request::respond`]) on its connection's thread.
pub type Handler = Arc<dyn Fn(Request) + Send + Sync>;

/// Where a connection is in its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading a request's head (and a small body), or waiting for the next one.
    Head,
    /// Running the handler and writing its answer.
    Answer,
}

struct Entry {
    id: u64,
    connection: Connection,
    phase: Phase,
    since: Instant,
    deadline: Instant,
    /// Shut down already (evicted or late); its thread is ending.
    closing: bool,
}

struct Table {
    next_id: u64,
    entries: Vec<Entry>,
}

/// What the accept thread, the reaper, the pool and every connection share.
pub(crate) struct Shared {
    limits: Limits,
    on_refusal: OnRefusal,
    closed: AtomicBool,
    table: Mutex<Table>,
    /// Wakes the reaper: on close, and when the first connection comes.
    reaper: Condvar,
    /// Told when a connection leaves the table (the accept thread may wait for room).
    room: Condvar,
    pool: Pool,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the table leaves plain data: go on with it.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Registers a new connection, evicting the one idle longest when at the cap.
    fn admit(self: &Arc<Self>, connection: &Connection) -> Option<Ticket> {
        let mut table = self.table();
        if self.closed() {
            return None;
        }
        let max = self.limits.max_connections.max(1);
        // Connections being closed leave within moments once their threads run: a
        // burst waits for them a little before it is refused.
        let waited_enough = Instant::now() + Duration::from_millis(100);
        while table.entries.len() >= 2 * max {
            let now = Instant::now();
            if now >= waited_enough || self.closed() {
                drop(table);
                (self.on_refusal)(Refusal::Overloaded);
                return None;
            }
            table = self
                .room
                .wait_timeout(table, waited_enough - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let live = table.entries.iter().filter(|e| !e.closing).count();
        if live >= max {
            if let Some(oldest) = table
                .entries
                .iter_mut()
                .filter(|e| !e.closing)
                .min_by_key(|e| e.since)
            {
                oldest.closing = true;
                let _ = oldest.connection.shutdown(Shutdown::Both);
                (self.on_refusal)(Refusal::Evicted);
            }
        }
        let now = Instant::now();
        let id = table.next_id;
        table.next_id += 1;
        table.entries.push(Entry {
            id,
            connection: connection.clone(),
            phase: Phase::Head,
            since: now,
            deadline: now + self.limits.head_timeout,
            closing: false,
        });
        if table.entries.len() == 1 {
            self.reaper.notify_all();
        }
        Some(Ticket {
            shared: Arc::clone(self),
            id,
        })
    }

    /// Shuts down every connection past its deadline.
    fn reap(&self, now: Instant) {
        let mut table = self.table();
        for entry in table.entries.iter_mut() {
            if !entry.closing && entry.deadline <= now {
                entry.closing = true;
                let _ = entry.connection.shutdown(Shutdown::Both);
                (self.on_refusal)(match entry.phase {
                    Phase::Head => Refusal::HeadTimeout,
                    Phase::Answer => Refusal::WriteTimeout,
                });
            }
        }
    }

    /// Stops accepting and shuts every connection down; joins nothing.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut table = self.table();
        for entry in table.entries.iter_mut() {
            entry.closing = true;
            let _ = entry.connection.shutdown(Shutdown::Both);
        }
        drop(table);
        self.reaper.notify_all();
        self.pool.close();
    }
}

/// One connection's place in the table; dropping it frees the place.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    id: u64,
}

impl Ticket {
    /// The connection starts `phase` now, with that phase's deadline.
    pub(crate) fn enter(&self, phase: Phase) {
        let limit = match phase {
            Phase::Head => self.shared.limits.head_timeout,
            Phase::Answer => self.shared.limits.write_timeout,
        };
        let now = Instant::now();
        let mut table = self.shared.table();
        if let Some(entry) = table.entries.iter_mut().find(|e| e.id == self.id) {
            entry.phase = phase;
            entry.since = now;
            entry.deadline = now + limit;
        }
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Counts a refusal the connection itself decided.
    pub(crate) fn refused(&self, why: Refusal) {
        (self.shared.on_refusal)(why);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut table = self.shared.table();
        table.entries.retain(|e| e.id != self.id);
        drop(table);
        self.shared.room.notify_one();
    }
}

type Task = Box<dyn FnOnce() + Send>;

/// At most one thread for each connection the table may hold (twice
/// `max_connections`), started as needed and kept; a task waits in the queue only
/// while a thread that has finished its connection takes it up.
struct Pool {
    state: Mutex<PoolState>,
    ready: Condvar,
}

struct PoolState {
    tasks: std::collections::VecDeque<Task>,
    threads: usize,
    idle: usize,
    closed: bool,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            state: Mutex::new(PoolState {
                tasks: std::collections::VecDeque::new(),
                threads: 0,
                idle: 0,
                closed: false,
            }),
            ready: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
        self.state().closed = true;
        self.ready.notify_all();
    }
}

fn run_task(shared: &Arc<Shared>, task: Task) {
    let mut state = shared.pool.state();
    if state.closed {
        return;
    }
    state.tasks.push_back(task);
    // Idle threads already woken for earlier tasks still count as idle until they
    // run: a thread is started whenever the queue holds more tasks than idle threads
    // can take, so that no task waits behind a connection's deadline.
    if state.tasks.len() > state.idle && state.threads < 2 * shared.limits.max_connections.max(1) {
        let worker = Arc::clone(shared);
        let started = thread::Builder::new()
            .name("http-conn".into())
            .stack_size(shared.limits.thread_stack)
            .spawn(move || pool_thread(&worker));
        if started.is_ok() {
            state.threads += 1;
        }
        // A thread the system refused: the task waits for a running one.
    } else {
        shared.pool.ready.notify_one();
    }
}

fn pool_thread(shared: &Arc<Shared>) {
    let pool = &shared.pool;
    loop {
        let task = {
            let mut state = pool.state();
            loop {
                if state.closed {
                    state.threads -= 1;
                    return;
                }
                if let Some(task) = state.tasks.pop_front() {
                    break task;
                }
                state.idle += 1;
                state = pool.ready.wait(state).unwrap_or_else(|p| p.into_inner());
                state.idle -= 1;
            }
        };
        // A handler that panics costs its connection, not the thread's place.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
    }
}

fn reaper_thread(shared: &Shared) {
    let tick = Duration::from_millis(100);
    while !shared.closed() {
        let table = shared.table();
        // Every 100 ms while a connection is open; asleep while none is (`admit` and
        // `close` wake it), so an idle daemon's monitor costs no wake-up.
        if table.entries.is_empty() {
            drop(shared.reaper.wait(table));
        } else {
            drop(shared.reaper.wait_timeout(table, tick));
        }
        shared.reap(Instant::now());
    }
}

/// An HTTP server with [`Limits`]: see the module's documentation.
pub struct GuardedServer {
    shared: Arc<Shared>,
    addr: ListenAddr,
}

impl GuardedServer {
    /// Serves `listener`, calling `handler` for each request on its connection's
    /// thread and `on_refusal` for each connection closed or refused early.
    pub fn start<L: Into<Listener>>(
        listener: L,
        limits: Limits,
        on_refusal: OnRefusal,
        handler: Handler,
    ) -> std::io::Result<GuardedServer> {
        let listener = listener.into();
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            limits,
            on_refusal,
            closed: AtomicBool::new(false),
            table: Mutex::new(Table {
                next_id: 0,
                entries: Vec::new(),
            }),
            reaper: Condvar::new(),
            room: Condvar::new(),
            pool: Pool::new(),
        });
        let reaping = Arc::clone(&shared);
        thread::Builder::new()
            .name("http-reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || reaper_thread(&reaping))?;
        let accepting = Arc::clone(&shared);
        let started = thread::Builder::new()
            .name("http-accept".into())
            .stack_size(64 * 1024)
            .spawn(move || accept_loop(&listener, &accepting, &handler));
        if let Err(e) = started {
            shared.close();
            return Err(e);
        }
        Ok(GuardedServer { shared, addr })
    }

    /// The address listened on.
    pub fn server_addr(&self) -> ListenAddr {
        self.addr.clone()
    }

    /// Connections open now (being served or being closed).
    pub fn connections(&self) -> usize {
        self.shared.table().entries.len()
    }
}

impl Drop for GuardedServer {
    fn drop(&mut self) {
        self.shared.close();
        // Wake the accept thread: a connection to ourselves (it may fail at the file
        // limit; the thread then sees the flag within its 1 s pause).
        if let ListenAddr::IP(addr) = &self.addr {
            let target = if addr.ip().is_unspecified() {
                let loopback: std::net::IpAddr = if addr.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                };
                SocketAddr::new(loopback, addr.port())
            } else {
                *addr
            };
            let _ = std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200));
        }
    }
}

fn accept_loop(listener: &Listener, shared: &Arc<Shared>, handler: &Handler) {
    let mut pause: Option<Duration> = None;
    let mut last_logged: Option<Instant> = None;
    let mut unlogged = 0u64;
    while !shared.closed() {
        match listener.accept() {
            Ok((socket, _)) => {
                pause = None;
                if shared.closed() {
                    break;
                }
                let Some(ticket) = shared.admit(&socket) else {
                    continue;
                };
                let handler = Arc::clone(handler);
                run_task(
                    shared,
                    Box::new(move || serve_connection(socket, ticket, &handler)),
                );
            }
            Err(e) => {
                if shared.closed() {
                    break;
                }
                (shared.on_refusal)(Refusal::AcceptFailed);
                unlogged += 1;
                let due = last_logged.map_or(true, |t| t.elapsed() >= Duration::from_secs(10));
                if due {
                    log::warn!(
                        "HTTP accept failed ({unlogged} time(s) since the last report): {e}; retrying"
                    );
                    last_logged = Some(Instant::now());
                    unlogged = 0;
                }
                let wait = pause.map_or(Duration::from_millis(5), |p| {
                    (p * 2).min(Duration::from_secs(1))
                });
                pause = Some(wait);
                thread::sleep(wait);
            }
        }
    }
}

fn serve_connection(socket: Connection, ticket: Ticket, handler: &Handler) {
    let (read, write) = RefinedTcpStream::new(socket);
    let client = ClientConnection::guarded(write, read, ticket);
    for request in client {
        handler(request);
    }
}
