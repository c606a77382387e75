//! The forwarder: an established passthrough connection's plain requests and their answers moved between the
//! two sockets by one native thread, off the interpreter and its event loop (proxy/net/forwarder.py).
//!
//! Python decides which requests are plain for a connection (a `ForwardTable`: the API versions the session
//! forwards unchanged and whose answers it leaves unchanged) and hands the connection over when nothing is
//! outstanding. The forwarder then reads each request's header as the session reads it (client id, tagged
//! fields, a Produce's acks), forwards it, and matches each answer to its request by order and correlation
//! id. Anything else ends the phase, never a guess: a request not in the table (or one it cannot read) is
//! handed back unread with whatever followed it, and with the requests sent before it whose answers have
//! not come (Python's pumps answer them first); a frame that breaks the protocol ends the connection, with
//! the reason the Python path gives. An answer whose endpoints are a tagged field (KIP-951 leader hints) is
//! skipped to its tagged section by the walker's plan, and when it has one, rewritten by Python like the session
//! rewrites it (`Forwarder.rewrites`: queued for the Trio thread, the connection waiting meanwhile, not the thread). Each
//! connection has a bounded turn (`TURN_BYTES`) before the next (`run`).
//!
//! A large Fetch answer (`STREAM_MIN`) goes on to the client as it arrives instead of once it is whole: the bytes before
//! its tagged section, and for a tenant before any topic id not seen whole in the grant, are sent as they come, and
//! between TCP sockets the rest of a partition's record batches moves through a pipe (splice(2)), never copied
//! through this process. The whole answer is judged as any other once it has come; if Python must rewrite it and the
//! rewrite differs in what was already sent (or in its size), the connection ends (`stream`, `answers`).
//!
//! A virtual cluster's connection has entries with a `Tenant` part (Produce and Fetch, by topic id or by name) and a
//! `Grant`: the topic ids, names and fetch sessions the session let through, void once the VC state changes
//! (`Generation`). Such a request is served only when it validates and names nothing else; such an answer goes
//! back untouched only when it has no message, no id outside the grant and no session change (proxy/core/grants.py).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::tls;
use crate::{
    be_signed, count, items, malformed, parse, put_string, skip, skip_tags, uvarint, validate, Fail, Node, Walk, MAX_STRING,
};

const READ_CHUNK: usize = 16 * 1024; // room made for a receive (more when a known frame needs it)
const FETCH: i16 = 1;
// A Fetch answer this large goes on to the client as it arrives (cut-through), not once it is whole: a consumer asks
// again only when it has the last answer, so reading a megabyte whole before sending it adds that read to each
// round trip (docs/performance.md, "The consumer against direct").
const STREAM_MIN: usize = 64 * 1024;
const STREAM_STEP: usize = 16 * 1024; // new bytes of such an answer between two looks at what may go on
// Of its record batches, what has not come yet when the rest of the answer before it has gone on moves from one
// socket to the other through a pipe (splice(2)), never copied through this process, when this much of it is left.
const SPLICE_MIN: usize = 16 * 1024;
const WAKE: u64 = u64::MAX;
const EVENTS: usize = 256;
// One connection's turn on the forwarder's thread: about this many bytes handled (read from a socket, TLS records
// included, sent, or forwarded as frames) before the next connection's turn. One that still has work then waits at
// the back of the queue (`run`), so that a connection that always has bytes never starves the others.
const TURN_BYTES: usize = 256 * 1024;
// What a frame read and forwarded costs a turn besides its bytes (its walk, a send each): many small frames are work.
const FRAME_COST: usize = 512;

/// What the forwarder needs of one plain API version.
struct Entry {
    acks: bool,              // a Produce: acks=0 has no answer
    request_flexible: bool,  // request header v2 (tagged fields after the client id)
    response_flexible: bool, // response header v1 (tagged fields after the correlation id)
    tags: Option<Node>,      // the answer's regular fields, to find its tagged section (KIP-951)
    tenant: Option<Tenant>,  // a virtual cluster's request: served only when it names nothing but granted ids
    errors: Option<Errors>,  // where the answer's error codes are, for a `Tally` (None: not served while counting)
    records: Option<Node>,   // an answer with record batches (Fetch): its regular fields, to stream it (`streamable`)
    metered: u8,             // what a quota meters (`METERED_*`): served only within the phase's `Allowance` for it
}

/// What a quota meters of an API (proxy/core/forward_table.py): nothing, the request's size (Produce: charged before
/// it is sent, so served only when it fits), or the answer's (Fetch: known once it comes, so served while anything
/// is left, its answer charged whole even past what is left, and the connection handed back then).
const METERED_NO: u8 = 0;
const METERED_REQUEST: u8 = 1;
const METERED_ANSWER: u8 = 2;

/// Where an answer's error codes are, as the metrics read them (proxy/observability/metrics.py): every one at any
/// depth, or (a Fetch: records in the answer) only the top-level one, at a fixed offset in the body (None: it has
/// none).
enum Errors {
    Top(Option<u64>),
    Walk(Node),
}

/// The distinct non-zero error codes of an answer (size prefix included); an answer it cannot walk has none (as
/// Python's scan, which never costs a connection).
fn answer_errors(entry: &Entry, errors: &Errors, frame: &[u8]) -> Vec<i16> {
    let mut out = Vec::new();
    let Ok(body) = response_body(entry, frame) else { return out };
    match errors {
        Errors::Top(None) => {}
        Errors::Top(Some(at)) => {
            let at = (body + at) as usize;
            if let Some(raw) = frame.get(at..at + 2) {
                if be_i16(raw) != 0 {
                    out.push(be_i16(raw));
                }
            }
        }
        Errors::Walk(node) => {
            if error_codes(node, frame, body, &mut out).is_err() {
                out.clear();
            }
        }
    }
    out
}

fn error_codes(node: &Node, buf: &[u8], off: u64, out: &mut Vec<i16>) -> Walk<u64> {
    match node {
        Node::PError => {
            let Some(raw) = buf.get(off as usize..off as usize + 2) else {
                return malformed("int16 past end of buffer");
            };
            let code = be_i16(raw);
            if code != 0 && !out.contains(&code) {
                out.push(code);
            }
            Ok(off + 2)
        }
        Node::PArray { flexible, item } => {
            let (n, mut off) = items(buf, off, *flexible)?;
            for _ in 0..n {
                off = error_codes(item, buf, off, out)?;
            }
            Ok(off)
        }
        Node::PStruct { flexible, steps } => {
            let mut off = off;
            for step in steps {
                off = error_codes(step, buf, off, out)?;
            }
            if *flexible {
                off = skip_tags(buf, off)?;
            }
            Ok(off)
        }
        other => skip(other, buf, off),
    }
}

/// Request counts, latency buckets and bytes of the requests the forwarder served, per API key, for the metrics of
/// one (virtual cluster, cluster id): Python folds them into its own counters when /metrics is read (`drain`).
#[derive(Default)]
struct ApiCounts {
    requests: u64,
    buckets: Vec<u64>, // one per bound, then +Inf
    nanos: u64,
    errors: Vec<(i16, u64)>, // error code, answers that carried it
}

#[derive(Default)]
struct Counts {
    apis: HashMap<i16, ApiCounts>,
    bytes_in: u64,
    bytes_out: u64,
}

struct TallyInner {
    bounds: Vec<u64>, // ns, ascending: a request of d ns counts in the first bucket whose bound is >= d
    counts: Mutex<Counts>,
}

impl TallyInner {
    fn record(&self, key: i16, nanos: u64, bytes_in: u64, bytes_out: u64, errors: &[i16]) {
        let bucket = self.bounds.partition_point(|&bound| bound < nanos);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.bytes_in += bytes_in;
        counts.bytes_out += bytes_out;
        let api = counts.apis.entry(key).or_default();
        if api.buckets.is_empty() {
            api.buckets = vec![0; self.bounds.len() + 1];
        }
        api.requests += 1;
        api.buckets[bucket] += 1;
        api.nanos += nanos;
        for &code in errors {
            match api.errors.iter_mut().find(|(c, _)| *c == code) {
                Some((_, n)) => *n += 1,
                None => api.errors.push((code, 1)),
            }
        }
    }
}

/// What `Tally.drain` gives per API key: (key, requests, bucket counts, seconds in all, (error code, count) pairs).
type Drained = (i16, u64, Vec<u64>, f64, Vec<(i16, u64)>);

#[pyclass(frozen)]
pub struct Tally {
    inner: Arc<TallyInner>,
}

#[pymethods]
impl Tally {
    /// `bounds`: the latency histogram's bucket bounds in seconds, ascending (metrics.py's BUCKETS).
    #[new]
    fn new(bounds: Vec<f64>) -> Self {
        let bounds = bounds.iter().map(|s| (s * 1e9).round() as u64).collect();
        Tally { inner: Arc::new(TallyInner { bounds, counts: Mutex::new(Counts::default()) }) }
    }

    /// Everything counted since the last drain, and zero from then on: (per API key, bytes in, bytes out).
    fn drain(&self) -> (Vec<Drained>, u64, u64) {
        let counts = std::mem::take(&mut *self.inner.counts.lock().unwrap_or_else(|e| e.into_inner()));
        let apis = counts
            .apis
            .into_iter()
            .map(|(key, api)| (key, api.requests, api.buckets, api.nanos as f64 / 1e9, api.errors))
            .collect();
        (apis, counts.bytes_in, counts.bytes_out)
    }
}

/// What a tenant's request must be for the forwarder to serve it unchanged (proxy/core/forward_table.py): a body the
/// strict walker accepts, every name a null string or a topic id the connection's `Grant` holds; and what its
/// answer must be to go back unchanged: every message null and every topic id granted (else Python's rewrite).
struct Tenant {
    validate: Node, // the request body's strict plan (walker.validate)
    request: Node,  // the request's names (the tenancy splice's plan)
    response: Node, // the answer's names and messages (the tenancy splice's plan)
    // A Fetch (KIP-227 sessions): where in the body its session id (then epoch) is. Its session must be none or one
    // the grant holds, and an answer that opens, closes or loses a session is Python's (the ownership table).
    session: Option<u64>,
    // A Fetch before v15, a ListOffsets: where its replica id is. Only a consumer's (negative) is served: a
    // follower's is refused.
    replica: Option<u64>,
}

/// A Fetch's session as its request named it: (session id, epoch).
type Note = Option<(i32, i32)>;

/// A request sent whose answer was not written, as Python adopts it: (correlation id, key, version, a Fetch's session,
/// its size in bytes, ns since it was read).
type Outstanding = (i32, i16, i16, Note, u64, u64);
/// A span's record as Python takes it (`Phase.take_spans`).
type SpanTuple<'py> = (
    u64,
    i16,
    i16,
    i32,
    u64,
    u64,
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    u64,
    bool,
);
/// An outstanding request as Python adopts it: with a sampled one's draw and copy.
type Adopted<'py> = (i32, i16, i16, Note, u64, u64, Option<(u64, Bound<'py, PyBytes>)>);

/// A counter Python bumps whenever the virtual clusters' state changes (proxy/tenancy/model.py, `apply`): the whole
/// state's, or one virtual cluster's. Every grant made before of what it counts is void from then on, read without
/// the interpreter.
#[pyclass(frozen)]
pub struct Generation {
    cell: Arc<AtomicU64>,
}

#[pymethods]
impl Generation {
    #[new]
    fn new() -> Self {
        Generation { cell: Arc::new(AtomicU64::new(0)) }
    }

    fn bump(&self) {
        self.cell.fetch_add(1, Ordering::Release);
    }

    fn value(&self) -> u64 {
        self.cell.load(Ordering::Acquire)
    }
}

/// The topic ids a tenant connection's session let through unchanged, per API, at one generation of the state:
/// what the forwarder may pass for it without asking Python (proxy/core/stages/tenancy.py learns them).
struct Granted {
    cell: Arc<AtomicU64>, // the whole state's generation
    at: u64,
    vc_cell: Option<Arc<AtomicU64>>, // the connection's virtual cluster's (records of that VC alone)
    vc_at: u64,
    ids: Mutex<HashSet<(i16, u128)>>,
    names: Mutex<Names>,
    // The fetch sessions the VC owns on this connection's broker, while the ownership table has not let one go
    // since (`sessions_cell`: bumped when an id is dropped, evicted or given to another VC): (generation, ids).
    sessions_cell: Arc<AtomicU64>,
    sessions: Mutex<(u64, HashSet<i32>)>,
    // Of those, the ones a served Fetch named since Python last took them (`Grant.take_used`): the ownership table
    // keeps a session in use fresh, least recently used ones going first.
    used: Mutex<HashSet<i32>>,
}

/// A name and the one it stands for: the client's -> the broker's (requests), or back (answers).
type Renames = HashMap<Box<[u8]>, Box<[u8]>>;

/// What the forwarder renames, by kind (grants.py `RENAMED`): topic names and group ids, which are never null (a null
/// one is the session's), and transactional ids, whose null passes as it is.
const KINDS: usize = 3;
const TXN: usize = 1;
/// At most this many names of a kind per API in one grant: a client may name as many transactional ids as it likes,
/// and past this many the rest go by the session (the grant's memory stays bounded).
const MOST_NAMES: usize = 4096;
type Kinds = [Renames; KINDS];

/// The names the session let through renamed, per API: each link of the VC where the link and its reverse agree, and
/// each transactional id the caller may use (grants.py).
#[derive(Default)]
struct Names {
    forth: HashMap<i16, Kinds>,
    back: HashMap<i16, Kinds>,
}

/// A name to put in place of the bytes at [start, end) of a frame (its length prefix and itself), and whether it is a
/// compact string.
type Edit<'m> = (u64, u64, &'m [u8], bool);

/// The frame with its names replaced (`edits`, in order) and its size prefix set to the new size.
fn renamed(frame: &[u8], edits: &[Edit<'_>]) -> Vec<u8> {
    let grown: usize = edits.iter().map(|(_, _, to, _)| to.len() + 3).sum();
    let mut out = Vec::with_capacity(frame.len() + grown);
    let mut at = 0usize;
    for &(start, end, to, flexible) in edits {
        out.extend_from_slice(&frame[at..start as usize]);
        put_string(&mut out, to, flexible);
        at = end as usize;
    }
    out.extend_from_slice(&frame[at..]);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out
}

impl Granted {
    fn valid(&self) -> bool {
        self.cell.load(Ordering::Acquire) == self.at
            && self.vc_cell.as_ref().is_none_or(|c| c.load(Ordering::Acquire) == self.vc_at)
    }

    fn owns_session(&self, session: i32) -> bool {
        let held = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        held.0 == self.sessions_cell.load(Ordering::Acquire) && held.1.contains(&session)
    }

    /// `owns_session`, noting the session as used when it does.
    fn use_session(&self, session: i32) -> bool {
        if !self.owns_session(session) {
            return false;
        }
        self.used.lock().unwrap_or_else(|e| e.into_inner()).insert(session);
        true
    }
}

#[pyclass(frozen)]
pub struct Grant {
    inner: Arc<Granted>,
}

#[pymethods]
impl Grant {
    /// A grant of the state as `generation` (the whole state's) and `vc` (the connection's virtual cluster's) count
    /// it now.
    #[new]
    #[pyo3(signature = (generation, sessions, vc=None))]
    fn new(generation: &Generation, sessions: &Generation, vc: Option<&Generation>) -> Self {
        let cell = Arc::clone(&generation.cell);
        let at = cell.load(Ordering::Acquire);
        let vc_cell = vc.map(|g| Arc::clone(&g.cell));
        let vc_at = vc_cell.as_ref().map_or(0, |c| c.load(Ordering::Acquire));
        let sessions_cell = Arc::clone(&sessions.cell);
        let now = sessions_cell.load(Ordering::Acquire);
        Grant {
            inner: Arc::new(Granted {
                cell,
                at,
                vc_cell,
                vc_at,
                ids: Mutex::new(HashSet::new()),
                names: Mutex::new(Names::default()),
                sessions_cell,
                sessions: Mutex::new((now, HashSet::new())),
                used: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// A fetch session the ownership table said the VC owns on this connection's broker, asked after the table's
    /// generation was `seen`: ignored if the table has let any id go since (another thread may have run between).
    fn add_session(&self, session: i32, seen: u64) {
        let now = self.inner.sessions_cell.load(Ordering::Acquire);
        if now != seen {
            return;
        }
        let mut held = self.inner.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 != now {
            *held = (now, HashSet::new()); // the table let some id go since: start again from what it says now
        }
        held.1.insert(session);
    }

    fn owns_session(&self, session: i32) -> bool {
        self.inner.owns_session(session)
    }

    /// The fetch sessions the forwarder served a Fetch of since the last call (each once), emptied.
    fn take_used(&self) -> Vec<i32> {
        let mut used = self.inner.used.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *used).into_iter().collect()
    }

    /// Whether the state is still the one the grant was made in.
    fn valid(&self) -> bool {
        self.inner.valid()
    }

    /// Topic ids (as integers) that `api_key` may name unchanged.
    fn add(&self, api_key: i16, ids: Vec<u128>) {
        let mut held = self.inner.ids.lock().unwrap_or_else(|e| e.into_inner());
        held.extend(ids.into_iter().map(|id| (api_key, id)));
    }

    /// Names of `kind` (grants.py `RENAMED`) that `api_key`'s requests may name, as (the client's name, the
    /// broker's), UTF-8: renamed one way in its requests and back in its answers.
    fn add_names(&self, api_key: i16, kind: usize, names: Vec<(Vec<u8>, Vec<u8>)>) -> PyResult<()> {
        if kind >= KINDS {
            return Err(PyValueError::new_err(format!("no names of kind {kind}")));
        }
        if names.iter().any(|(a, b)| a.len() as u64 > MAX_STRING || b.len() as u64 > MAX_STRING) {
            return Err(PyValueError::new_err("a name longer than a string may be"));
        }
        let mut held = self.inner.names.lock().unwrap_or_else(|e| e.into_inner());
        let held = &mut *held;
        let forth = &mut held.forth.entry(api_key).or_default()[kind];
        let back = &mut held.back.entry(api_key).or_default()[kind];
        for (name, physical) in names {
            if forth.len() >= MOST_NAMES {
                break;
            }
            forth.insert(name.clone().into(), physical.clone().into());
            back.insert(physical.into(), name.into());
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        let names = self.inner.names.lock().unwrap_or_else(|e| e.into_inner());
        let renamed: usize = names.forth.values().flatten().map(HashMap::len).sum();
        self.inner.ids.lock().unwrap_or_else(|e| e.into_inner()).len() + renamed
    }
}

/// Bytes of a quota (requests, of a request rate) the quota stage took out of its meters for one phase
/// (proxy/core/stages/quotas.py, `reserve`): the forwarder serves a metered request (`Entry::metered`) only while its
/// size fits in what is left, and hands the connection back at the first that does not; the session then charges that
/// request itself. A metered answer (a Fetch's) is charged whole as it comes; its request went only once the answer
/// before was charged, bounded by what was left then (`fetch_bounded`). While the phase lasts, Python counts what was
/// spent (`drain`) and tops the allowance up from the meters, or takes back what is left when they are in debt
/// (`revoke`), without the connection leaving the forwarder.
struct Allowed {
    left: AtomicU64,
    spent: AtomicU64,
    over: AtomicU64, // spent past what was left (answers: charged whole), not yet taken by Python
}

impl Allowed {
    /// Takes `size` bytes when they fit; false (nothing taken) otherwise.
    fn spend(&self, size: u64) -> bool {
        let taken = self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| left.checked_sub(size));
        if taken.is_err() {
            return false;
        }
        self.spent.fetch_add(size, Ordering::AcqRel);
        true
    }

    /// Takes `size` bytes of what is left, all of it if that is less (an answer already on its way): whether they
    /// fitted. All `size` bytes count as spent.
    fn spend_over(&self, size: u64) -> bool {
        let before = self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| Some(left.saturating_sub(size)));
        let before = before.unwrap_or(0);
        self.spent.fetch_add(size, Ordering::AcqRel);
        if before < size {
            self.over.fetch_add(size - before, Ordering::AcqRel);
        }
        before >= size
    }

    fn any_left(&self) -> bool {
        self.left.load(Ordering::Acquire) > 0
    }
}

/// Where a Fetch request's max_bytes sits in `frame` (v4+: the int32 after replica_id (before v15), max_wait_ms and
/// min_bytes; proxy/quotas/fetch_bound.py says the same from the schema), or None when the frame is too short.
fn fetch_max_bytes_at(frame: &[u8], version: i16, flexible: bool) -> Option<usize> {
    let length = be_i16(frame.get(12..14)?);
    let mut off = 14 + length.max(0) as usize;
    if flexible {
        off = skip_tags(frame, off as u64).ok()? as usize;
    }
    let at = off + if version >= 15 { 8 } else { 12 };
    frame.get(at..at + 4).map(|_| at)
}

/// A Fetch served under a consumer's byte rate, as the quota stage bounds one (proxy/core/stages/quotas.py): what its
/// answer may carry bounded by what the allowance holds now, its max_bytes lowered to that in a copy of `out` (the
/// broker reads it as the client meant: max_bytes is a soft bound, KIP-74). None: sent as it is.
fn fetch_bounded(out: &[u8], flexible: bool, allowance: &Allowed) -> Option<Vec<u8>> {
    let (key, version) = (be_i16(out.get(4..6)?), be_i16(out.get(6..8)?));
    if key != FETCH {
        return None;
    }
    let at = fetch_max_bytes_at(out, version, flexible)?;
    let left = allowance.left.load(Ordering::Acquire).clamp(1, i32::MAX as u64) as i32;
    if be_i32(&out[at..]) <= left {
        return None;
    }
    let mut copy = out.to_vec();
    copy[at..at + 4].copy_from_slice(&left.to_be_bytes());
    Some(copy)
}

#[pyclass(frozen)]
pub struct Allowance {
    inner: Arc<Allowed>,
}

#[pymethods]
impl Allowance {
    #[new]
    fn new(bytes: u64) -> Self {
        let inner = Allowed { left: AtomicU64::new(bytes), spent: AtomicU64::new(0), over: AtomicU64::new(0) };
        Allowance { inner: Arc::new(inner) }
    }

    /// Takes `size` bytes as the forwarder does a request's: whether they fitted. For the tests.
    fn spend(&self, size: u64) -> bool {
        self.inner.spend(size)
    }

    /// Takes `size` bytes as the forwarder does an answer's: whether they fitted. For the tests.
    fn spend_over(&self, size: u64) -> bool {
        self.inner.spend_over(size)
    }

    /// The bytes spent since the last drain.
    fn drain(&self) -> u64 {
        self.inner.spent.swap(0, Ordering::AcqRel)
    }

    /// What is left to spend.
    fn left(&self) -> u64 {
        self.inner.left.load(Ordering::Acquire)
    }

    /// `bytes` more to spend.
    fn grant(&self, bytes: u64) {
        self.inner.left.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Takes back what is left: how much that was (the forwarder spends nothing more of it).
    fn revoke(&self) -> u64 {
        self.inner.left.swap(0, Ordering::AcqRel)
    }

    /// The bytes spent past what was left since the last look (an answer charged whole): a debt to the meters.
    fn overdrawn(&self) -> u64 {
        self.inner.over.swap(0, Ordering::AcqRel)
    }

    /// A Fetch request (a whole frame; `flexible`: its header has tagged fields) as the forwarder sends it under this
    /// allowance, its max_bytes lowered to what is left; None when it goes as it is. For the tests.
    fn bounded<'py>(&self, py: Python<'py>, frame: &[u8], flexible: bool) -> Option<Bound<'py, PyBytes>> {
        fetch_bounded(frame, flexible, &self.inner).map(|out| PyBytes::new(py, &out))
    }
}

/// A string's length (-1: null) and where its bytes start: a compact length (flexible versions) or an int16 one.
fn string_length(buf: &[u8], off: u64, flexible: bool) -> Walk<(i64, u64)> {
    if flexible {
        let (length, after) = uvarint(buf, off)?;
        return Ok((length as i64 - 1, after));
    }
    let Some(raw) = buf.get(off as usize..off as usize + 2) else {
        return malformed("int16 past end of buffer");
    };
    Ok((i64::from(be_i16(raw)), off + 2))
}

/// Whether every name the plan captures at `off` is one the grant lets through: a null string, a topic id it holds
/// for `key`, or a name it renames (`names`: appended to `edits`). A body it cannot walk is not (Python reads it).
fn granted<'m>(
    node: &Node,
    buf: &[u8],
    off: u64,
    ids: &HashSet<(i16, u128)>,
    key: i16,
    names: Option<&'m Kinds>,
    edits: &mut Vec<Edit<'m>>,
) -> Walk<(u64, bool)> {
    match node {
        Node::PString { flexible, .. } => {
            // Only a null name passes (just its length then); the walk stops at any other.
            if *flexible {
                let (length, after) = uvarint(buf, off)?;
                return Ok((after, length == 0));
            }
            let Some(raw) = buf.get(off as usize..off as usize + 2) else {
                return malformed("int16 past end of buffer");
            };
            Ok((off + 2, be_i16(raw) < 0))
        }
        Node::PUtf8 { flexible } => {
            // A string of a request the session decodes: kio refuses one that is not UTF-8, so it passes only if it is.
            let (length, start) = string_length(buf, off, *flexible)?;
            if length < 0 {
                return Ok((start, true));
            }
            let end = start + length as u64;
            let Some(raw) = buf.get(start as usize..end as usize) else {
                return malformed("string past end of buffer");
            };
            Ok((end, std::str::from_utf8(raw).is_ok()))
        }
        Node::PRename { flexible, kind } => {
            let (length, at) = string_length(buf, off, *flexible)?;
            if length < 0 {
                return Ok((at, *kind == TXN)); // a null transactional id (none) passes; a null topic name is the session's
            }
            let end = at + length as u64;
            let Some(raw) = buf.get(at as usize..end as usize) else {
                return malformed("string past end of buffer");
            };
            match names.and_then(|m| m.get(*kind)).and_then(|m| m.get(raw)) {
                Some(to) => {
                    edits.push((off, end, to, *flexible));
                    Ok((end, true))
                }
                None => Ok((end, false)),
            }
        }
        Node::PUuid { .. } => {
            let end = off + 16;
            let Some(raw) = buf.get(off as usize..end as usize) else {
                return malformed("uuid past end of buffer");
            };
            let id = u128::from_be_bytes(raw.try_into().expect("16 bytes"));
            Ok((end, ids.contains(&(key, id))))
        }
        Node::PArray { flexible, item } => {
            let (n, mut off) = items(buf, off, *flexible)?;
            for _ in 0..n {
                let (o, ok) = granted(item, buf, off, ids, key, names, edits)?;
                if !ok {
                    return Ok((o, false));
                }
                off = o;
            }
            Ok((off, true))
        }
        Node::PStruct { flexible, steps } => {
            let mut off = off;
            for step in steps {
                let (o, ok) = granted(step, buf, off, ids, key, names, edits)?;
                if !ok {
                    return Ok((o, false));
                }
                off = o;
            }
            if *flexible {
                off = skip_tags(buf, off)?;
            }
            Ok((off, true))
        }
        other => Ok((skip(other, buf, off)?, true)),
    }
}

/// Where a walk of an answer still arriving ran out.
enum Short {
    Bytes(u64), // inside a length-prefixed field (a Fetch's record batches) that ends at this offset
    Other,      // anywhere else: every byte that has come belongs to the regular fields
    Bad,        // not the end of what has come: the whole answer is judged when it has come
}

/// `skip` over the first bytes of an answer: where its regular fields end, or where the walk ran out.
fn reach(node: &Node, buf: &[u8], off: u64) -> Result<u64, Short> {
    let short = |fail: Fail| match fail {
        Fail::Truncated(_) => Short::Other,
        _ => Short::Bad,
    };
    match node {
        Node::Sized { flexible, prefix } => {
            let (length, start) = if *flexible {
                let (length, start) = uvarint(buf, off).map_err(short)?;
                (length as i64 - 1, start)
            } else {
                if off + prefix > buf.len() as u64 {
                    return Err(Short::Other);
                }
                (be_signed(&buf[off as usize..(off + prefix) as usize]), off + prefix)
            };
            let end = start + length.max(0) as u64;
            if end > buf.len() as u64 {
                return Err(Short::Bytes(end));
            }
            Ok(end)
        }
        Node::Array { flexible, item } => {
            let (n, mut off) = count(buf, off, *flexible).map_err(short)?;
            for _ in 0..n.max(0) {
                off = reach(item, buf, off)?;
            }
            Ok(off)
        }
        Node::Struct { flexible, steps } => {
            let mut off = off;
            for step in steps {
                off = reach(step, buf, off)?;
            }
            if !flexible {
                return Ok(off);
            }
            skip_tags(buf, off).map_err(short)
        }
        Node::NullStruct(inner) => {
            let Some(&marker) = buf.get(off as usize) else { return Err(Short::Other) };
            if marker == 0xFF {
                Ok(off + 1)
            } else {
                reach(inner, buf, off + 1)
            }
        }
        other => skip(other, buf, off).map_err(short),
    }
}

/// An entry as Python gives it (proxy/core/forward_table.py's `Entry`).
type EntryTuple<'py> = (
    i16,
    i16,
    bool,
    bool,
    bool,
    Bound<'py, PyAny>,
    Option<(Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>, Option<u64>, Option<u64>)>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    u8,
);

fn index(key: i16, version: i16) -> u32 {
    (u32::from(key as u16) << 16) | u32::from(version as u16)
}

/// The plain API versions of a connection, made once per distinct table (proxy/net/forwarder.py caches them).
#[pyclass(frozen)]
pub struct ForwardTable {
    entries: Arc<HashMap<u32, Entry>>,
}

#[pymethods]
impl ForwardTable {
    /// `entries`: (api_key, version, acks, request_flexible, response_flexible, tags plan or None, tenant plans
    /// (validate, request names, answer names, a Fetch's session offset, its replica id's offset) or None, errors
    /// plan or None, records plan or None, what a quota meters: 0 nothing, 1 the request's size, 2 the answer's).
    #[new]
    fn new(entries: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut map = HashMap::new();
        for item in entries.try_iter()? {
            let item = item?;
            let (key, version, acks, request_flexible, response_flexible, plan, tenant, errors, records, metered): EntryTuple<
                '_,
            > = item.extract()?;
            let tags = if plan.is_none() { None } else { Some(parse(&plan)?) };
            let records = if records.is_none() { None } else { Some(parse(&records)?) };
            let tenant = match tenant {
                None => None,
                Some((v, rq, rs, session, replica)) => Some(Tenant {
                    validate: parse(&v)?,
                    request: parse(&rq)?,
                    response: parse(&rs)?,
                    session,
                    replica,
                }),
            };
            // ("top", offset | None), or the walk of every error code, or None (none known).
            let errors = if errors.is_none() {
                None
            } else if let Ok((tag, at)) = errors.extract::<(String, Option<u64>)>() {
                if tag != "top" {
                    return Err(PyValueError::new_err(format!("unknown errors plan {tag:?}")));
                }
                Some(Errors::Top(at))
            } else {
                Some(Errors::Walk(parse(&errors)?))
            };
            if metered > METERED_ANSWER {
                return Err(PyValueError::new_err(format!("unknown metering {metered}")));
            }
            let entry = Entry { acks, request_flexible, response_flexible, tags, tenant, errors, records, metered };
            map.insert(index(key, version), entry);
        }
        Ok(ForwardTable { entries: Arc::new(map) })
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }

    /// The sketch a span's record keeps of an answer with record batches (tests hold it to the whole answer's scan);
    /// None when the API version is not in the table, has none, or its answer does not walk.
    fn sketch<'py>(&self, py: Python<'py>, key: i16, version: i16, frame: &[u8]) -> Option<Bound<'py, PyBytes>> {
        let entry = self.entries.get(&index(key, version))?;
        answer_sketch(entry, frame).map(|out| PyBytes::new(py, &out))
    }

    /// How the forwarder reads one request frame (size prefix included): (correlation id, whether an
    /// answer comes), or None when it leaves the request to Python. For the tests that hold it to the session.
    /// `counting`: as with a `Tally` (metrics on).
    #[pyo3(signature = (frame, grant=None, counting=false))]
    fn classify(&self, frame: &Bound<'_, PyAny>, grant: Option<&Grant>, counting: bool) -> PyResult<Option<(i32, bool)>> {
        let buffer = PyBuffer::<u8>::get(frame)?;
        let bytes = crate::bytes_of(&buffer)?;
        let grant = grant.map(|g| &*g.inner);
        let plain = plain_request(bytes, &self.entries, grant, counting);
        Ok(plain.map(|(correlation, _, answered, _, _)| (correlation, answered)))
    }

    /// The bytes the forwarder sends the broker for this request frame (a tenant's names renamed), or None when it
    /// leaves the request to Python. For the tests that hold it to the session.
    #[pyo3(signature = (frame, grant=None))]
    fn sent<'py>(
        &self,
        py: Python<'py>,
        frame: &Bound<'py, PyAny>,
        grant: Option<&Grant>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let buffer = PyBuffer::<u8>::get(frame)?;
        let bytes = crate::bytes_of(&buffer)?;
        let plain = plain_request(bytes, &self.entries, grant.map(|g| &*g.inner), false);
        Ok(plain.map(|(.., out)| PyBytes::new(py, out.as_deref().unwrap_or(bytes))))
    }

    /// The distinct non-zero error codes a `Tally` counts for this answer (size prefix included) to request
    /// `(key, version)`, or None when the entry knows none. For the tests that hold it to Python's scan.
    fn error_codes(&self, key: i16, version: i16, frame: &Bound<'_, PyAny>) -> PyResult<Option<Vec<i16>>> {
        let buffer = PyBuffer::<u8>::get(frame)?;
        let bytes = crate::bytes_of(&buffer)?;
        let Some(entry) = self.entries.get(&index(key, version)) else {
            return Err(PyValueError::new_err("not in the table"));
        };
        Ok(entry.errors.as_ref().map(|errors| answer_errors(entry, errors, bytes)))
    }

    /// Whether the forwarder passes this answer (size prefix included) to request `(key, version)` as it came;
    /// False: Python rewrites it (`Forwarder.rewrites`). For the tests that hold it to the session.
    #[pyo3(signature = (key, version, frame, grant=None, note=None))]
    fn untouched(
        &self,
        key: i16,
        version: i16,
        frame: &Bound<'_, PyAny>,
        grant: Option<&Grant>,
        note: Note,
    ) -> PyResult<bool> {
        let buffer = PyBuffer::<u8>::get(frame)?;
        let bytes = crate::bytes_of(&buffer)?;
        let Some(entry) = self.entries.get(&index(key, version)) else {
            return Err(PyValueError::new_err("not in the table"));
        };
        let answer = answer_untouched(entry, key, bytes, grant.map(|g| &*g.inner), note).map_err(PyValueError::new_err)?;
        Ok(matches!(answer, Answer::AsIs))
    }

    /// The bytes the forwarder writes to the client for this answer to request `(key, version)` (a tenant's names
    /// renamed back), or None when Python rewrites it. For the tests that hold it to the session.
    #[pyo3(signature = (key, version, frame, grant=None, note=None))]
    fn answered<'py>(
        &self,
        py: Python<'py>,
        key: i16,
        version: i16,
        frame: &Bound<'py, PyAny>,
        grant: Option<&Grant>,
        note: Note,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let buffer = PyBuffer::<u8>::get(frame)?;
        let bytes = crate::bytes_of(&buffer)?;
        let Some(entry) = self.entries.get(&index(key, version)) else {
            return Err(PyValueError::new_err("not in the table"));
        };
        Ok(match answer_untouched(entry, key, bytes, grant.map(|g| &*g.inner), note).map_err(PyValueError::new_err)? {
            Answer::AsIs => Some(PyBytes::new(py, bytes)),
            Answer::Renamed(out) => Some(PyBytes::new(py, &out)),
            Answer::Python => None,
        })
    }

    /// Of an answer still arriving (`part`: its first bytes, size prefix included) to request `(key, version)`: how
    /// many bytes the forwarder may send on now, and where the record batches it ends in end when they are not all
    /// there; None when it sends nothing more until the answer is whole. For the tests.
    #[pyo3(signature = (key, version, part, grant=None, note=None))]
    fn streamable(
        &self,
        key: i16,
        version: i16,
        part: &Bound<'_, PyAny>,
        grant: Option<&Grant>,
        note: Note,
    ) -> PyResult<Option<(usize, Option<usize>)>> {
        let buffer = PyBuffer::<u8>::get(part)?;
        let bytes = crate::bytes_of(&buffer)?;
        let Some(entry) = self.entries.get(&index(key, version)) else {
            return Err(PyValueError::new_err("not in the table"));
        };
        Ok(streamable(entry, key, bytes, grant.map(|g| &*g.inner), note))
    }
}

/// How a phase ended.
enum End {
    Yield,                // a request the forwarder does not serve is next: handed back with what followed it
    ClientClosed,         // the client's end of stream, everything answered
    BrokerClosed(String), // the broker's end of stream or a failed send or receive
    ClientFailed(String), // a failed send or receive on the client's socket
    Frame(String),        // not a Kafka frame (a size out of bounds, an end of stream in a frame)
    Protocol(String),     // an answer that is not the next one's, or cannot be read
    Detached,             // Python took it back (a drain, a close)
}

impl End {
    fn kind(&self) -> (&'static str, String) {
        match self {
            End::Yield => ("yield", String::new()),
            End::ClientClosed => ("client-closed", String::new()),
            End::BrokerClosed(why) => ("broker-closed", why.clone()),
            End::ClientFailed(why) => ("client-failed", why.clone()),
            End::Frame(why) => ("frame", why.clone()),
            End::Protocol(why) => ("protocol", why.clone()),
            End::Detached => ("detached", String::new()),
        }
    }
}

/// What Python reads of a live phase without the forwarder's help.
struct Published {
    last_active_ns: AtomicU64, // since the forwarder's epoch: the last request read or answer written
    in_flight: AtomicUsize,
}

struct Outcome {
    end: End,
    drawn: Option<u64>, // tracing: the sampling draw of the request at the front of `leftover`, if it had one
    leftover: Vec<u8>,        // the client's bytes read and not served
    broker_leftover: Vec<u8>, // the broker's bytes read and not yet an answer written
    in_flight: Vec<Outstanding>, // requests sent whose answers were not written
    in_flight_sampled: Vec<Option<(u64, Vec<u8>)>>, // of those, a sampled one's draw and copy (its span is Python's)
    requests: u64,
    responses: u64,
}

enum Command {
    Attach(Box<Conn>),
    Hold(u64),
    Detach(u64),
    Rewritten(u64, Result<Vec<u8>, String>),
}

/// An answer for Python to rewrite (`Forwarder.rewrites`): phase id, API key, version, the answer, a Fetch's session.
type Asked = (u64, i16, i16, Vec<u8>, Note);

struct Shared {
    epfd: i32,
    wake: i32,   // Python -> the thread: commands waiting
    notify: i32, // the thread -> Python: phases ended (their ids in `ready`)
    ready: Mutex<Vec<u64>>,
    spans_ready: Mutex<Vec<u64>>, // phases with span records waiting for Python (`Phase.take_spans`)
    span_bytes: Arc<AtomicUsize>, // what every phase's span records hold
    epoch: Instant,
    commands: Mutex<Vec<Command>>,
    outcomes: Mutex<HashMap<u64, Outcome>>,
    rewrites: Mutex<Vec<Asked>>, // answers waiting for Python's rewrite (their phases' ids in them)
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Wakes Python's reader of `notify` (phases ended, span records waiting).
    fn notify_python(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the forwarder's own eventfd.
        unsafe { libc::write(self.notify, &one as *const u64 as *const libc::c_void, 8) };
    }

    fn send(&self, command: Command) {
        self.commands.lock().unwrap_or_else(|e| e.into_inner()).push(command);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the forwarder's own eventfd.
        unsafe { libc::write(self.wake, &one as *const u64 as *const libc::c_void, 8) };
    }
}

/// A request forwarded whose answer has not been written: correlation id, table index, a Fetch's session, when it
/// was read (ns since the epoch), its size, and whether a span samples it (its copy waits in `Conn::sampled`).
type Sent = (i32, u32, Note, u64, u64, bool);

/// A sampled request served, for Python to make its span of (`Phase.take_spans`): its draw (the trace id's low 64
/// bits), API key and version, correlation id, when it was read and answered (ns since the forwarder's epoch), and
/// copies of the request, of the broker's answer and of what the client got when that differs (renamed, rewritten).
struct SpanRecord {
    draw: u64,
    key: i16,
    version: i16,
    correlation: i32,
    start: u64,
    end: u64,
    request: Vec<u8>,
    upstream: Option<Vec<u8>>,
    sent: Option<Vec<u8>>,
    size: u64,     // of the answer the client got
    elided: bool,  // the answers' copies are sketches: record batches left out, their lengths kept (`sketch`)
}

/// The spans a phase's sampled requests wait in until Python takes them, bounded per phase and for the process (`all`:
/// the bytes every phase's hold): past either, a sampled request is handed back instead (Python serves it and makes
/// its span).
struct Spans {
    records: Vec<SpanRecord>,
    bytes: usize,
    all: Arc<AtomicUsize>,
}

const SPANS_MOST: usize = 4096;
const SPANS_MOST_BYTES: usize = 16 << 20;
const SPANS_ALL_BYTES: usize = 256 << 20;

impl Spans {
    fn new(all: Arc<AtomicUsize>) -> Self {
        Spans { records: Vec::new(), bytes: 0, all }
    }

    fn room(&self, more: usize) -> bool {
        self.records.len() < SPANS_MOST
            && self.bytes + more <= SPANS_MOST_BYTES
            && self.all.load(Ordering::Relaxed) + more <= SPANS_ALL_BYTES
    }

    fn push(&mut self, record: SpanRecord) {
        let size = record.request.len()
            + record.upstream.as_ref().map_or(0, Vec::len)
            + record.sent.as_ref().map_or(0, Vec::len);
        self.bytes += size;
        self.all.fetch_add(size, Ordering::Relaxed);
        self.records.push(record);
    }

    fn take(&mut self) -> Vec<SpanRecord> {
        self.all.fetch_sub(std::mem::take(&mut self.bytes), Ordering::Relaxed);
        std::mem::take(&mut self.records)
    }
}

impl Drop for Spans {
    fn drop(&mut self) {
        self.all.fetch_sub(self.bytes, Ordering::Relaxed); // a phase's records Python never took
    }
}

struct Conn {
    id: u64,
    client: i32, // Python's sockets: Python closes them only after the phase has ended (and left epoll)
    broker: i32,
    tls: Option<tls::Shared>, // a TLS client's session (tls.rs): `cin` and `cout` hold its plaintext
    broker_tls: Option<tls::Shared>, // the proxy's TLS session to the broker: `bin` and `bout` hold its plaintext
    table: Arc<HashMap<u32, Entry>>,
    grant: Option<Arc<Granted>>, // a tenant connection's: the ids its requests may name
    // What quotas let metered requests spend, and metered answers (none: no such request is served); under a request
    // rate, every request spends one of `count` (none: no rate, nothing counted).
    allowance: Option<Arc<Allowed>>,
    answer_allowance: Option<Arc<Allowed>>,
    count: Option<Arc<Allowed>>,
    max_in_flight: usize,
    max_frame: usize,
    limit: usize, // bytes read ahead, or waiting to be sent, before reading stops
    cin: Vec<u8>,
    bin: Inbound,
    cout: Vec<u8>,
    bout: Vec<u8>,
    cout_at: usize,
    bout_at: usize,
    in_flight: VecDeque<Sent>,
    tally: Option<Arc<TallyInner>>, // metrics on: each request served is counted here
    epoch: Instant,
    client_readable: bool,
    broker_readable: bool,
    // The peer hung up (or the socket failed): its readiness raises no edge after the bytes already queued.
    client_hup: bool,
    broker_hup: bool,
    client_writable: bool,
    broker_writable: bool,
    hold: bool, // the next request is not the forwarder's, or a drain: read no further from the client
    client_eof: bool,
    streamed: usize, // of the answer at the front of `bin`, the bytes already sent on (`STREAM_MIN`); 0: none
    looked: usize,   // how much of it had come at the last look
    // Of its record batches, the bytes still to splice from the broker (`bin` holds zeros in their place, so that
    // offsets stay the answer's), and those in the pipe, not yet sent to the client.
    splice_left: usize,
    piped: usize,
    pipe: Option<Pipe>, // while a large answer's record batches are spliced
    spliceable: Option<bool>, // both sockets TCP (learnt at the first large answer): only then is it spliced
    pipe_bytes: Option<usize>,
    requests: u64,
    responses: u64,
    published: Arc<Published>,
    // Tracing (KIP-1313 spans, a ratio of requests sampled): a request whose draw is under the bound gets a span, which
    // Python makes, so it is handed back with its draw; the rest are served. None: no tracing.
    sampling: Option<Sampling>,
    drawn: Option<u64>, // the draw of the request the phase stopped at
    // Sampled requests served here: their spans' records, for Python (None: a sampled request is handed back), and
    // the copies of those still waiting for their answers, in the order sent.
    spans: Option<Arc<Mutex<Spans>>>,
    sampled: VecDeque<(u64, Vec<u8>)>,
    spans_waiting: bool, // a record came to an empty `spans`: Python is told after this pump (`Shared::spans_ready`)
    rewrite: Rewrite,    // the answer at the front of `bin`, when Python rewrites it
    spent: usize,        // of this turn (`TURN_BYTES`)
    more: bool,          // the turn ended with work left: the connection waits for its next (`run`)
    queued: bool,        // in `run`'s queue of connections waiting for their turn
}

/// An answer Python rewrites (the session's response side: `Forwarder.rewrites`), on the Trio thread: the forwarder's
/// thread never waits for it. Meanwhile the connection reads and sends nothing more but what was already on its way
/// (its answers go in order, and a rewrite may mute it: `Phase.hold`); the others go on.
enum Rewrite {
    No,
    Asked,
    Given(Result<Vec<u8>, String>), // what Python made of it, or why it could not
}

/// The sampler's rule (OpenTelemetry's TraceIdRatioBased): a request is sampled when its trace id's low 64 bits, drawn
/// at random, are under `bound`. The forwarder draws them for each request it would serve; Python makes the rest of the
/// trace id, so the rule and the odds are the same whichever path drew.
struct Sampling {
    bound: u128, // 2**64: every request
    first: Option<u64>, // the draw Python made for the request it handed over at
    state: u64,         // splitmix64
}

impl Sampling {
    fn new(bound: u128, first: Option<u64>) -> Self {
        let mut seed = [0u8; 8];
        // SAFETY: fills at most 8 bytes of a live buffer; a short or failed read leaves a seed of the clock's bits.
        let got = unsafe { libc::getrandom(seed.as_mut_ptr() as *mut libc::c_void, 8, 0) };
        let mut state = u64::from_ne_bytes(seed);
        if got != 8 {
            state ^= std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        }
        Sampling { bound, first, state }
    }

    fn draw(&mut self) -> u64 {
        if let Some(first) = self.first.take() {
            return first;
        }
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The pipe a large answer's record batches go through (splice(2)): made for that answer and closed after it, so that
/// pipes count the answers on their way, not the connections (the kernel limits a user's pipe pages).
struct Pipe {
    read: i32,
    write: i32,
    room: usize,
}

impl Pipe {
    /// `size`: asked of the kernel (a test's small pipe); None: the kernel's default (64 KiB).
    fn new(size: Option<usize>) -> io::Result<Pipe> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into a live array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain fcntl calls on a descriptor just made; a size refused leaves the default.
        let room = unsafe {
            if let Some(size) = size {
                libc::fcntl(fds[1], libc::F_SETPIPE_SZ, size as libc::c_int);
            }
            libc::fcntl(fds[1], libc::F_GETPIPE_SZ)
        };
        Ok(Pipe { read: fds[0], write: fds[1], room: room.max(4096) as usize })
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: the descriptors are this pipe's own.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

/// Whether `fd` is a TCP socket: splice(2) is used between those alone, as the proxy's are. (Into a Unix socket that
/// could not take all of a splice, the writer here was never woken again: tests/unit/test_forward_stream.py runs both.)
fn is_tcp(fd: i32) -> bool {
    let mut domain: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `length` bytes into a live c_int.
    let found = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_DOMAIN, &mut domain as *mut libc::c_int as *mut libc::c_void, &mut length)
    };
    found == 0 && (domain == libc::AF_INET || domain == libc::AF_INET6)
}

/// Moves up to `n` bytes from `from` to `to` without copying them through this process: the bytes moved, 0 at the
/// end of `from`'s stream.
fn splice(from: i32, to: i32, n: usize) -> io::Result<usize> {
    loop {
        // SAFETY: no offsets (both ends are a socket or a pipe); the kernel moves at most `n` bytes.
        let moved = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                n,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if moved >= 0 {
            return Ok(moved as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The broker's bytes (`Conn::bin`): a Vec, but while a large answer's record batches are spliced, an anonymous mapping
/// of that answer's size holding it alone. The kernel gives a mapping's pages zeroed and makes each only when it is
/// touched, so the place of the spliced bytes (offsets stay the answer's) costs neither a memset nor memory: zeroing
/// it in a Vec was an eighth of the consume path's CPU (docs/performance.md).
struct Inbound {
    vec: Vec<u8>,
    map: Option<Mapping>,
}

struct Mapping {
    ptr: *mut u8,
    size: usize, // the answer's, size prefix included
    len: usize,  // of it, what has come (or been spliced through)
}

// SAFETY: the mapping is owned by one `Inbound`, which is moved to the forwarder's thread whole and used there alone.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(size: usize) -> Option<Mapping> {
        // SAFETY: a new private anonymous mapping; checked for failure before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then(|| Mapping { ptr: ptr as *mut u8, size, len: 0 })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is this one's own, of `size` bytes, and no slice of it outlives `self`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.size) };
    }
}

impl std::ops::Deref for Inbound {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.map {
            // SAFETY: `len` bytes of a live mapping, every one of them zeroed by the kernel or written since.
            Some(m) => unsafe { std::slice::from_raw_parts(m.ptr, m.len) },
            None => &self.vec,
        }
    }
}

impl Inbound {
    fn new() -> Self {
        Inbound { vec: Vec::new(), map: None }
    }

    /// Whether a receive may read now: a mapping takes its answer's bytes and nothing after them.
    fn has_room(&self) -> bool {
        self.map.as_ref().is_none_or(|m| m.len < m.size)
    }

    fn receive(&mut self, fd: i32, want: usize, most: usize) -> io::Result<Received> {
        let Some(m) = &mut self.map else { return receive(fd, &mut self.vec, want, most) };
        let room = (m.size - m.len).min(most);
        // SAFETY: `room` bytes of the mapping lie after the `len` counted.
        let n = unsafe { recv_into(fd, m.ptr.add(m.len), room)? };
        m.len += n;
        Ok(Received { n, cost: n, drained: n < room })
    }

    /// `n` bytes of the answer went by the pipe: their place, zeros (untouched, in a mapping).
    fn skip_spliced(&mut self, n: usize) {
        match &mut self.map {
            Some(m) => m.len = (m.len + n).min(m.size), // a splice never runs past the answer's end (`stream`)
            None => self.vec.resize(self.vec.len() + n, 0),
        }
    }

    /// The answer at the front (all that is held, `size` bytes when whole) is to be spliced: into a mapping, unless one
    /// cannot be made (then the Vec, zeroed where spliced).
    fn map_answer(&mut self, size: usize) {
        if self.map.is_some() || self.vec.len() >= size {
            return;
        }
        if let Some(mut m) = Mapping::new(size) {
            // SAFETY: the mapping has room for `size` bytes, more than the Vec holds.
            unsafe { std::ptr::copy_nonoverlapping(self.vec.as_ptr(), m.ptr, self.vec.len()) };
            m.len = self.vec.len();
            self.map = Some(m);
            self.vec = Vec::new();
        }
    }

    fn drain_front(&mut self, at: usize) {
        match &self.map {
            Some(_) => {
                let rest = self[at..].to_vec();
                self.map = None;
                self.vec = rest;
            }
            None => {
                self.vec.drain(..at);
            }
        }
    }

    /// A Vec grown past `limit` by a larger frame is let go once it is empty (the Python path's buffers are kept up to
    /// receive_buffer_bytes, as are these).
    fn let_go(&mut self, limit: usize) {
        if self.map.is_none() && self.vec.is_empty() && self.vec.capacity() > limit {
            self.vec = Vec::new();
        }
    }

    fn into_vec(self) -> Vec<u8> {
        match &self.map {
            Some(_) => self.to_vec(),
            None => self.vec,
        }
    }
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_i16(b: &[u8]) -> i16 {
    i16::from_be_bytes([b[0], b[1]])
}

/// What one receive read: `n` bytes (0 at end of stream), and whether they were all the socket held.
struct Received {
    n: usize,
    cost: usize, // bytes taken from the socket (a TLS session's records: maybe none of their plaintext yet)
    // Fewer bytes than there was room for: a stream socket's recv(2) takes all it holds up to the room given, so it
    // held no more. The next bytes to arrive raise a new edge (after a hang-up none: read on to the end of stream),
    // so the receive that would meet EAGAIN (a system call a request in each direction) need not be made.
    drained: bool,
}

/// Reads into `buf`'s spare room (at least `want` bytes of it, at most `most`).
fn receive(fd: i32, buf: &mut Vec<u8>, want: usize, most: usize) -> io::Result<Received> {
    buf.reserve(want);
    let room = (buf.capacity() - buf.len()).min(most);
    // SAFETY: the Vec's spare capacity holds `room` bytes; only the `n` the kernel wrote are counted as initialised.
    let n = unsafe { recv_into(fd, buf.as_mut_ptr().add(buf.len()), room)? };
    unsafe { buf.set_len(buf.len() + n) };
    Ok(Received { n, cost: n, drained: n < room })
}

/// One recv(2) of at most `room` bytes to `at`: the bytes read, 0 at end of stream.
///
/// # Safety
/// `at` must be valid for writes of `room` bytes.
unsafe fn recv_into(fd: i32, at: *mut u8, room: usize) -> io::Result<usize> {
    let n = unsafe { libc::recv(fd, at as *mut libc::c_void, room, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends what `buf` holds from `at`; false when the kernel's buffer is full.
fn send_out(fd: i32, buf: &mut Vec<u8>, at: &mut usize) -> io::Result<bool> {
    while *at < buf.len() {
        let rest = &buf[*at..];
        // SAFETY: sends from a live slice; MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE.
        let n = unsafe { libc::send(fd, rest.as_ptr() as *const libc::c_void, rest.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(false);
            }
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        *at += n as usize;
    }
    buf.clear();
    *at = 0;
    Ok(true)
}

/// The length of the whole frame at the front of `buf` (size prefix included), None while it is not all there;
/// a size the Python path's decoder refuses is refused with its words.
fn whole_frame(buf: &[u8], max_frame: usize) -> Result<Option<usize>, End> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = be_i32(buf);
    if size < 0 {
        return Err(End::Frame(format!("negative frame size {size}")));
    }
    if size as usize > max_frame {
        return Err(End::Frame(format!("frame of {size} bytes exceeds the limit of {max_frame}")));
    }
    let total = 4 + size as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// Sends `frame` now when nothing waits before it (no copy), and queues what the kernel did not take.
fn send_or_queue(fd: i32, frame: &[u8], out: &mut Vec<u8>, at: usize, writable: &mut bool) -> io::Result<()> {
    let mut sent = 0;
    if at == out.len() && *writable {
        while sent < frame.len() {
            let rest = &frame[sent..];
            // SAFETY: sends from a live slice; MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE.
            let n =
                unsafe { libc::send(fd, rest.as_ptr() as *const libc::c_void, rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock => {
                        *writable = false;
                        break;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(err),
                }
            }
            sent += n as usize;
        }
    }
    out.extend_from_slice(&frame[sent..]);
    Ok(())
}

/// Sends `frame` to a peer: as `send_or_queue`, or through its TLS session (queued as plaintext, then encrypted and
/// sent as far as the socket takes it).
fn send_to(
    tls: Option<&tls::Shared>,
    fd: i32,
    frame: &[u8],
    out: &mut Vec<u8>,
    at: &mut usize,
    writable: &mut bool,
) -> io::Result<()> {
    let Some(state) = tls else { return send_or_queue(fd, frame, out, *at, writable) };
    out.extend_from_slice(frame);
    if *writable {
        *writable = tls::flush(state, fd, out, at, TURN_BYTES)?;
    }
    Ok(())
}

/// A request the forwarder serves: (correlation id, table index, whether an answer comes, a Fetch's session, the frame
/// to send in its place when it names topics by name).
type Served = (i32, u32, bool, Note, Option<Vec<u8>>);

/// The request's `Served`, or None: not the forwarder's.
fn plain_request(frame: &[u8], table: &HashMap<u32, Entry>, grant: Option<&Granted>, counting: bool) -> Option<Served> {
    if frame.len() < 12 {
        return None;
    }
    let (key, version, correlation) = (be_i16(&frame[4..]), be_i16(&frame[6..]), be_i32(&frame[8..]));
    let idx = index(key, version);
    let entry = table.get(&idx)?;
    if counting && entry.errors.is_none() {
        return None; // its answer's errors would go uncounted: Python's
    }
    // The header as the session parses it: a nullable client id in UTF-8, then tagged fields (header v2).
    let mut off = 14usize;
    let length = be_i16(frame.get(12..14)?);
    if length >= 0 {
        let end = off + length as usize;
        std::str::from_utf8(frame.get(off..end)?).ok()?;
        off = end;
    }
    if entry.request_flexible {
        off = skip_tags(frame, off as u64).ok()? as usize;
    }
    let mut note = None;
    let mut renamed_frame = None;
    if let Some(tenant) = &entry.tenant {
        // The tenancy stage's reading: a body the strict walker accepts, naming only what the grant holds, with no
        // tagged field of its own (a Fetch's cluster id or replica state is the session's to read).
        let grant = grant.filter(|g| g.valid())?;
        let body = off as u64;
        let end = validate(&tenant.validate, frame, body, frame.len() as u64).ok()?;
        if (tenant.session.is_some() || tenant.replica.is_some()) && end != frame.len() as u64 {
            // The session decodes a Fetch (or a ListOffsets) and encodes it again: bytes after its body would not go on.
            return None;
        }
        {
            let ids = grant.ids.lock().unwrap_or_else(|e| e.into_inner());
            let names = grant.names.lock().unwrap_or_else(|e| e.into_inner());
            let Node::PStruct { steps, .. } = &tenant.request else { return None };
            let mut edits = Vec::new();
            let mut at = body;
            for step in steps {
                let (o, ok) = granted(step, frame, at, &ids, key, names.forth.get(&key), &mut edits).ok()?;
                if !ok {
                    return None;
                }
                at = o;
            }
            if entry.request_flexible && *frame.get(at as usize)? != 0 {
                return None;
            }
            if !edits.is_empty() {
                renamed_frame = Some(renamed(frame, &edits));
            }
        }
        if let Some(at) = tenant.replica {
            let at = off + at as usize;
            if be_i32(frame.get(at..at + 4)?) >= 0 {
                return None; // a follower's fetch: the session refuses it (brokers only)
            }
        }
        if let Some(at) = tenant.session {
            let at = off + at as usize;
            let (session, epoch) = (be_i32(frame.get(at..at + 4)?), be_i32(frame.get(at + 4..at + 8)?));
            if session != 0 && !grant.use_session(session) {
                return None; // another VC's, one gone, or one not seen yet: the fetch-session table decides
            }
            note = Some((session, epoch));
        }
    }
    let mut answered = true;
    if entry.acks {
        // Produce: transactional_id (a compact or an int16-length nullable string), then acks.
        if entry.request_flexible {
            let (length, o) = uvarint(frame, off as u64).ok()?;
            off = o as usize + length.saturating_sub(1) as usize;
        } else {
            let length = be_i16(frame.get(off..off + 2)?);
            off += 2 + length.max(0) as usize;
        }
        answered = be_i16(frame.get(off..off + 2)?) != 0;
    }
    Some((correlation, idx, answered, note, renamed_frame))
}

/// How an answer goes back to the client.
enum Answer {
    AsIs,
    Renamed(Vec<u8>), // a tenant's, its topic names put back as the client named them
    Python,           // rewritten by the session (`Forwarder.rewrites`)
}

/// How an answer goes back: as the broker sent it when there is no tagged field where endpoints may be (KIP-951
/// leader hints) and, for a tenant, no message and no topic id or name the grant does not hold (or a grant made void
/// since); with its topic names renamed back when those are all it names; else Python rewrites it as the session
/// does. Err: a header or body the forwarder cannot walk.
fn answer_untouched(entry: &Entry, key: i16, frame: &[u8], grant: Option<&Granted>, note: Note) -> Result<Answer, String> {
    let body = response_body(entry, frame)?;
    if let Some(node) = &entry.tags {
        let tags = skip(node, frame, body).map_err(|_| "malformed response body".to_string())?;
        match frame.get(tags as usize) {
            None => return Err("truncated response body".into()),
            Some(0) => {}
            Some(_) => return Ok(Answer::Python),
        }
    }
    if let Some(tenant) = &entry.tenant {
        let Some(grant) = grant.filter(|g| g.valid()) else { return Ok(Answer::Python) };
        if tenant.session.is_some() && !session_unchanged(frame, body, note) {
            return Ok(Answer::Python);
        }
        let ids = grant.ids.lock().unwrap_or_else(|e| e.into_inner());
        let names = grant.names.lock().unwrap_or_else(|e| e.into_inner());
        let mut edits = Vec::new();
        // A walk that fails is the session's to judge (it closes the connection with its own reason).
        return Ok(match granted(&tenant.response, frame, body, &ids, key, names.back.get(&key), &mut edits) {
            Ok((_, true)) if edits.is_empty() => Answer::AsIs,
            Ok((_, true)) => Answer::Renamed(renamed(frame, &edits)),
            _ => Answer::Python,
        });
    }
    Ok(Answer::AsIs)
}

/// A Fetch answer's head (throttle_time_ms, error_code, session_id) leaves its session as the request left it (none,
/// or one that goes on); else the fetch-session table learns from it, in Python.
fn session_unchanged(frame: &[u8], body: u64, note: Note) -> bool {
    let at = body as usize;
    let (Some(error), Some(session)) = (frame.get(at + 4..at + 6), frame.get(at + 6..at + 10)) else {
        return false;
    };
    let Some((sent, epoch)) = note else { return false };
    be_i16(error) == 0 && be_i32(session) == sent && (sent == 0 || epoch > 0)
}

/// How much of an answer still arriving (`part`: its first bytes, size prefix included) may go on now, and where the
/// record batches it has come into end when they are not all there (what may then be spliced through). What may go:
/// bytes before its tagged section (KIP-951 hints, which Python may rewrite) and, for a tenant, before any id not
/// seen whole in the grant. None: nothing more for now (an answer Python will rewrite, or a walk that stopped on
/// something other than the end of what has come); the whole answer is judged when it has come.
fn streamable(entry: &Entry, key: i16, part: &[u8], grant: Option<&Granted>, note: Note) -> Option<(usize, Option<usize>)> {
    let plan = entry.records.as_ref()?;
    let body = response_body(entry, part).ok()?;
    let (mut safe, bytes) = match reach(plan, part, body) {
        Ok(tags) => (tags as usize, None), // every regular field has come: the tagged section starts here
        Err(Short::Bytes(end)) => (part.len(), Some(end as usize)),
        Err(Short::Other) => (part.len(), None),
        Err(Short::Bad) => return None,
    };
    if let Some(tenant) = &entry.tenant {
        let grant = grant.filter(|g| g.valid())?;
        if tenant.session.is_some() && !session_unchanged(part, body, note) {
            return None;
        }
        let ids = grant.ids.lock().unwrap_or_else(|e| e.into_inner());
        // Only a Fetch by topic id streams (one by name is renamed whole, with no `records` plan): no name here.
        match granted(&tenant.response, part, body, &ids, key, None, &mut Vec::new()) {
            Ok((_, true)) => {}
            // Every id read whole is granted; outside record batches, the last 16 bytes may hold one not whole yet.
            Err(Fail::Truncated(_)) if bytes.is_none() => safe = safe.min(part.len().saturating_sub(16)),
            Err(Fail::Truncated(_)) => {}
            _ => return None,
        }
    }
    Some((safe, bytes))
}

/// `buf[off..]` walked with a skip plan and copied to `out`, but for the bytes of each field of bytes or records (a
/// sized one with a 4-byte prefix: in a Fetch answer, its record batches) after their length: what a span's scan
/// reads of an answer (proxy/observability/scan.py, `elided`), whatever the size of its batches (spliced ones read as
/// zeros here, and are left out as well).
fn sketch(node: &Node, buf: &[u8], off: u64, out: &mut Vec<u8>) -> Walk<u64> {
    match node {
        Node::Sized { flexible, prefix: 4 } => {
            let (length, at) = if *flexible {
                let (length, at) = uvarint(buf, off)?;
                (length as i64 - 1, at)
            } else {
                let at = off + 4;
                if at > buf.len() as u64 {
                    return malformed("length past end of buffer");
                }
                (be_signed(&buf[off as usize..at as usize]), at)
            };
            out.extend_from_slice(&buf[off as usize..at as usize]);
            let end = at + length.max(0) as u64;
            if end > buf.len() as u64 {
                return malformed("bytes past end of buffer");
            }
            Ok(end)
        }
        Node::Array { flexible, item } => {
            let (n, at) = items(buf, off, *flexible)?;
            out.extend_from_slice(&buf[off as usize..at as usize]);
            let mut at = at;
            for _ in 0..n {
                at = sketch(item, buf, at, out)?;
            }
            Ok(at)
        }
        Node::Struct { flexible, steps } => {
            let mut at = off;
            for step in steps {
                at = sketch(step, buf, at, out)?;
            }
            if !flexible {
                return Ok(at);
            }
            let end = skip_tags(buf, at)?;
            out.extend_from_slice(&buf[at as usize..end as usize]);
            Ok(end)
        }
        Node::NullStruct(inner) => {
            let Some(&first) = buf.get(off as usize) else { return malformed("struct past end of buffer") };
            out.push(first);
            if first == 0xFF {
                Ok(off + 1)
            } else {
                sketch(inner, buf, off + 1, out)
            }
        }
        other => {
            let end = skip(other, buf, off)?;
            out.extend_from_slice(&buf[off as usize..end as usize]);
            Ok(end)
        }
    }
}

/// A copy of an answer with record batches (`Entry::records`: a Fetch's) as its `sketch`, its size set; None for one
/// without, or one the plan cannot walk (its span then reads a whole copy).
fn answer_sketch(entry: &Entry, frame: &[u8]) -> Option<Vec<u8>> {
    let plan = entry.records.as_ref()?;
    let body = response_body(entry, frame).ok()?;
    let mut out = frame[..body as usize].to_vec();
    let end = sketch(plan, frame, body, &mut out).ok()?;
    out.extend_from_slice(frame.get(end as usize..)?);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Some(out)
}

/// Where an answer's body starts: after the size, the correlation id and (response header v1) the tagged fields.
fn response_body(entry: &Entry, frame: &[u8]) -> Result<u64, String> {
    if !entry.response_flexible {
        return Ok(8);
    }
    skip_tags(frame, 8).map_err(|_| "malformed response header".to_string())
}

impl Conn {
    fn pending_out(buf: &[u8], at: usize) -> usize {
        buf.len() - at
    }

    /// Requests read whole from `cin`, forwarded while they are plain.
    fn requests(&mut self) -> Result<bool, End> {
        let mut at = 0;
        let mut progress = false;
        while !self.hold && Conn::pending_out(&self.bout, self.bout_at) < self.limit && self.spent < TURN_BYTES {
            let Some(total) = whole_frame(&self.cin[at..], self.max_frame)? else { break };
            if self.in_flight.len() >= self.max_in_flight {
                break;
            }
            let frame = &self.cin[at..at + total];
            // Under a request rate, a request is served only while the count has one left; it is counted once it is
            // sure to be served (after its bytes are spent), past what is left only if Python took that back between.
            let counted = self.count.as_ref().is_none_or(|c| c.any_left());
            let mut served = plain_request(frame, &self.table, self.grant.as_deref(), self.tally.is_some());
            // Under a consumer's byte rate, a Fetch waits for the answer of the one before to be charged (a broker reads
            // one request of a channel at a time): each is then bounded by what the allowance holds when it goes.
            let metered_answer = |idx: &u32| self.table.get(idx).is_some_and(|e| e.metered == METERED_ANSWER);
            if served.as_ref().is_some_and(|s| metered_answer(&s.1)) && self.in_flight.iter().any(|s| metered_answer(&s.1))
            {
                break;
            }
            // Drawn before anything is spent for it: a sampled request is Python's (its span), and one handed back for
            // another reason keeps its draw, so that no request is drawn twice.
            let drawn = match (&served, self.sampling.as_mut()) {
                (Some(_), Some(sampling)) => Some((sampling.draw(), sampling.bound)),
                _ => None,
            };
            // Sampled: served here when its span's record has room (Python makes the span from it), else handed back.
            let sampled = drawn.is_some_and(|(draw, bound)| (draw as u128) < bound);
            let kept = sampled
                && self.spans.as_ref().is_some_and(|spans| {
                    let held: usize = self.sampled.iter().map(|(_, copy)| copy.len()).sum();
                    spans.lock().unwrap_or_else(|e| e.into_inner()).room(held + 2 * total)
                });
            if sampled && !kept {
                served = None;
            }
            let served = served
                .filter(|&(_, idx, ..)| {
                    counted
                        && match self.table[&idx].metered {
                            METERED_NO => true,
                            METERED_REQUEST => self.allowance.as_ref().is_some_and(|a| a.spend(total as u64)),
                            _ => self.answer_allowance.as_ref().is_some_and(|a| a.any_left()),
                        }
                });
            if let (Some(count), Some(_)) = (&self.count, &served) {
                count.spend_over(1);
            }
            match served {
                None => {
                    self.hold = true;
                    self.drawn = drawn.map(|(draw, _)| draw);
                }
                Some((correlation, idx, answered, note, renamed)) => {
                    let timed = self.tally.is_some() || kept;
                    let read = if timed { self.epoch.elapsed().as_nanos() as u64 } else { 0 };
                    let out = renamed.as_deref().unwrap_or(frame);
                    let entry = &self.table[&idx];
                    let bounded = match (&self.answer_allowance, entry.metered) {
                        (Some(allowance), METERED_ANSWER) => fetch_bounded(out, entry.request_flexible, allowance),
                        _ => None,
                    };
                    let out = bounded.as_deref().unwrap_or(out);
                    send_to(self.broker_tls.as_ref(), self.broker, out, &mut self.bout, &mut self.bout_at, &mut self.broker_writable)
                        .map_err(|e| End::BrokerClosed(e.to_string()))?;
                    let draw = drawn.map_or(0, |(draw, _)| draw);
                    if answered {
                        self.in_flight.push_back((correlation, idx, note, read, total as u64, kept));
                        if kept {
                            self.sampled.push_back((draw, frame.to_vec()));
                        }
                    } else {
                        // An acks=0 Produce: done once sent on, as Python counts it (and ends its span).
                        let now = self.epoch.elapsed().as_nanos() as u64;
                        if let Some(tally) = &self.tally {
                            tally.record((idx >> 16) as u16 as i16, now.saturating_sub(read), total as u64, 0, &[]);
                        }
                        if let (true, Some(spans)) = (kept, &self.spans) {
                            let mut spans = spans.lock().unwrap_or_else(|e| e.into_inner());
                            self.spans_waiting |= spans.records.is_empty();
                            spans.push(SpanRecord {
                                draw,
                                key: (idx >> 16) as u16 as i16,
                                version: idx as u16 as i16,
                                correlation,
                                start: read,
                                end: now,
                                request: frame.to_vec(),
                                upstream: None,
                                sent: None,
                                size: 0,
                                elided: false,
                            });
                        }
                    }
                    self.requests += 1;
                    self.spent += total + FRAME_COST;
                    at += total;
                    progress = true;
                }
            }
        }
        if at > 0 {
            self.cin.drain(..at);
        }
        Ok(progress)
    }

    /// Answers read whole from `bin`, each the next outstanding request's, written to the client; a large Fetch
    /// answer is sent on as it arrives (`stream`).
    fn answers(&mut self, shared: &Shared) -> Result<bool, End> {
        let mut at = 0;
        let mut progress = false;
        let mut partial = false;
        while Conn::pending_out(&self.cout, self.cout_at) < self.limit && self.piped == 0 && self.spent < TURN_BYTES {
            let Some(total) = whole_frame(&self.bin[at..], self.max_frame)? else {
                partial = true;
                break;
            };
            let frame = &self.bin[at..at + total];
            let Some(&(expected, idx, note, read, size, kept)) = self.in_flight.front() else {
                return Err(End::Protocol("response from the broker with no request outstanding".into()));
            };
            if total < 8 {
                return Err(End::Protocol(format!("broker answered correlation id None, expected {expected}")));
            }
            let correlation = be_i32(&frame[4..]);
            if correlation != expected {
                return Err(End::Protocol(format!(
                    "broker answered correlation id {correlation}, expected {expected}"
                )));
            }
            let entry = &self.table[&idx];
            let (key, version) = ((idx >> 16) as u16 as i16, idx as u16 as i16);
            let failed = |why: String| End::Protocol(format!("cannot rewrite response to api {key} v{version}: {why}"));
            let (rewritten, hooked) = match std::mem::replace(&mut self.rewrite, Rewrite::No) {
                Rewrite::Given(result) => (Some(result.map_err(failed)?), true),
                Rewrite::Asked => unreachable!("a connection waiting for a rewrite is not pumped"),
                Rewrite::No => match answer_untouched(entry, key, frame, self.grant.as_deref(), note).map_err(failed)? {
                    Answer::AsIs => (None, false),
                    Answer::Renamed(out) => (Some(out), false),
                    Answer::Python => {
                        // Queued for the Trio thread; this answer is taken again once Python has given it back.
                        let asked = (self.id, key, version, frame.to_vec(), note);
                        shared.rewrites.lock().unwrap_or_else(|e| e.into_inner()).push(asked);
                        shared.notify_python();
                        self.rewrite = Rewrite::Asked;
                        progress = true;
                        break;
                    }
                },
            };
            let out = rewritten.as_deref().unwrap_or(frame);
            let sent = std::mem::take(&mut self.streamed);
            self.looked = 0;
            self.pipe = None; // empty: `piped` is 0 here
            if sent > 0 && rewritten.is_some() && (out.len() != total || out[..sent] != frame[..sent]) {
                // Its first bytes went on as they came, and the rewrite changed them (a leader hint's host of another
                // length): the client cannot be given both. It fetches again on a new connection.
                return Err(failed(format!("{sent} bytes of it were sent on before the rewrite")));
            }
            if entry.metered == METERED_ANSWER && !hooked {
                // Charged as the quota stage charges it (the session's rewrite charges its own): past what is left,
                // the connection goes back once this answer has gone, and the session mutes it.
                let fitted = self.answer_allowance.as_ref().is_some_and(|a| a.spend_over(out.len() as u64));
                self.hold |= !fitted;
            }
            send_to(self.tls.as_ref(), self.client, &out[sent..], &mut self.cout, &mut self.cout_at, &mut self.client_writable)
                .map_err(|e| End::ClientFailed(e.to_string()))?;
            if let (Some(tally), Some(errors)) = (&self.tally, &entry.errors) {
                let codes = answer_errors(entry, errors, out); // the client's: as the Python path counts them
                let now = self.epoch.elapsed().as_nanos() as u64;
                tally.record(key, now.saturating_sub(read), size, out.len() as u64, &codes);
            }
            let sampled = if kept { self.sampled.pop_front() } else { None };
            if let (Some(spans), Some((draw, request))) = (&self.spans, sampled) {
                // An answer with record batches (a Fetch's) is kept as its sketch: what a span reads of it.
                let (upstream, sent, elided) = match answer_sketch(entry, frame) {
                    Some(sketch) => (sketch, rewritten.as_ref().and_then(|_| answer_sketch(entry, out)), true),
                    None => (frame.to_vec(), rewritten.as_ref().map(|_| out.to_vec()), false),
                };
                let mut spans = spans.lock().unwrap_or_else(|e| e.into_inner());
                self.spans_waiting |= spans.records.is_empty();
                spans.push(SpanRecord {
                    draw,
                    key,
                    version,
                    correlation,
                    start: read,
                    end: self.epoch.elapsed().as_nanos() as u64,
                    request,
                    upstream: Some(upstream),
                    sent,
                    size: out.len() as u64,
                    elided,
                });
            }
            self.in_flight.pop_front();
            self.responses += 1;
            self.spent += out.len() - sent + FRAME_COST;
            at += total;
            progress = true;
        }
        if partial {
            progress |= self.stream(at)?;
        }
        if at > 0 {
            self.bin.drain_front(at);
        }
        if self.splice_left > 0 {
            // The answer that streams is at the front now; its size was checked by `whole_frame`.
            let size = self.frame_size(false);
            self.bin.map_answer(size);
        }
        Ok(progress)
    }

    /// Sends on what may go of a large Fetch answer still arriving at `bin[at..]`, when nothing waits to go to the
    /// client before it; when the rest of its record batches is large, they are spliced through next (`splice_in`).
    /// Whether the whole answer goes as it came is decided once it has all come (`answers`).
    fn stream(&mut self, at: usize) -> Result<bool, End> {
        let part = &self.bin[at..];
        if part.len() < 8
            || part.len() < self.looked + STREAM_STEP
            || self.cout_at != self.cout.len()
            || self.splice_left > 0
            || self.piped > 0
        {
            return Ok(false);
        }
        let Some(&(expected, idx, note, ..)) = self.in_flight.front() else { return Ok(false) };
        // The size was checked by `whole_frame`; a wrong correlation id is refused when the answer is whole.
        if (idx >> 16) as u16 as i16 != FETCH || 4 + be_i32(part) as usize <= STREAM_MIN || be_i32(&part[4..]) != expected
        {
            return Ok(false);
        }
        self.looked = part.len();
        let Some((safe, bytes)) = streamable(&self.table[&idx], FETCH, part, self.grant.as_deref(), note) else {
            return Ok(false);
        };
        let mut progress = false;
        if safe > self.streamed {
            send_to(
                self.tls.as_ref(),
                self.client,
                &part[self.streamed..safe],
                &mut self.cout,
                &mut self.cout_at,
                &mut self.client_writable,
            )
                .map_err(|e| End::ClientFailed(e.to_string()))?;
            self.streamed = safe;
            progress = true;
        }
        if let Some(end) = bytes {
            // Never past the answer's own end: batches that claim more are malformed, found so once it is whole.
            let left = end.min(4 + be_i32(part) as usize) - part.len();
            let plain = self.tls.is_none() && self.broker_tls.is_none(); // TLS bytes are sealed here: never spliced
            let spliceable = *self.spliceable.get_or_insert_with(|| plain && is_tcp(self.client) && is_tcp(self.broker));
            if spliceable && self.streamed == part.len() && self.cout_at == self.cout.len() && left >= SPLICE_MIN {
                if self.pipe.is_none() {
                    // Without one (the process' descriptor limit), the answer goes on as it arrives, copied.
                    self.pipe = Pipe::new(self.pipe_bytes).ok();
                }
                if self.pipe.is_some() {
                    self.splice_left = left;
                    progress = true;
                }
            }
        }
        Ok(progress)
    }

    /// Record batches from the broker into the pipe (zeros in `bin` in their place); false when the broker has no
    /// more for now or the pipe is full.
    fn splice_in(&mut self) -> Result<bool, End> {
        let Some(pipe) = &self.pipe else { return Ok(false) };
        let room = (pipe.room.saturating_sub(self.piped)).min(self.splice_left);
        if room == 0 {
            return Ok(false);
        }
        match splice(self.broker, pipe.write, room) {
            Ok(0) => Err(End::BrokerClosed("upstream broker closed the connection".into())),
            Ok(n) => {
                self.bin.skip_spliced(n);
                self.splice_left -= n;
                self.piped += n;
                self.streamed += n;
                self.spent += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Nothing to read, or a pipe whose slots are full (a slot per piece the socket held, whatever its
                // size): only an empty pipe tells them apart. Taken for the first, the second would wait for a
                // readiness the broker's socket had already given (edge-triggered), with the rest of the answer in it.
                if self.piped == 0 {
                    self.broker_readable = false;
                }
                Ok(false)
            }
            Err(e) => Err(End::BrokerClosed(e.to_string())),
        }
    }

    /// The pipe's bytes to the client; false when the client takes no more for now.
    fn splice_out(&mut self) -> Result<bool, End> {
        let Some(pipe) = &self.pipe else { return Ok(false) };
        match splice(pipe.read, self.client, self.piped) {
            Ok(n) => {
                self.piped -= n;
                self.spent += n;
                Ok(n > 0)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.client_writable = false;
                Ok(false)
            }
            Err(e) => Err(End::ClientFailed(e.to_string())),
        }
    }

    /// One turn: moves what can move now, up to `TURN_BYTES` (`more`: work was left); Some(end) when the phase is over.
    fn pump(&mut self, shared: &Shared) -> Option<End> {
        self.spent = 0;
        self.more = false;
        loop {
            let mut progress = false;
            // Waiting for Python's rewrite of the answer at the front: only what is already on its way moves.
            let waiting = matches!(self.rewrite, Rewrite::Asked);
            let sealed = self.broker_tls.as_ref().is_some_and(tls::pending);
            if self.broker_writable && (self.bout_at < self.bout.len() || sealed) {
                let before = Conn::pending_out(&self.bout, self.bout_at);
                let sent = match &self.broker_tls {
                    Some(state) => tls::flush(state, self.broker, &mut self.bout, &mut self.bout_at, TURN_BYTES),
                    None => send_out(self.broker, &mut self.bout, &mut self.bout_at),
                };
                self.spent += before.saturating_sub(Conn::pending_out(&self.bout, self.bout_at));
                match sent {
                    Ok(all) => {
                        self.broker_writable = all;
                        progress = true;
                    }
                    Err(e) => return Some(End::BrokerClosed(e.to_string())),
                }
            }
            let sealed = self.tls.as_ref().is_some_and(tls::pending); // records the session made while reading
            if self.client_writable && (self.cout_at < self.cout.len() || sealed) {
                let before = Conn::pending_out(&self.cout, self.cout_at);
                let sent = match &self.tls {
                    Some(state) => tls::flush(state, self.client, &mut self.cout, &mut self.cout_at, TURN_BYTES),
                    None => send_out(self.client, &mut self.cout, &mut self.cout_at),
                };
                self.spent += before.saturating_sub(Conn::pending_out(&self.cout, self.cout_at));
                match sent {
                    Ok(all) => {
                        self.client_writable = all;
                        progress = true;
                    }
                    Err(e) => return Some(End::ClientFailed(e.to_string())),
                }
            }
            if self.client_writable && self.piped > 0 {
                match self.splice_out() {
                    Ok(p) => progress |= p,
                    Err(end) => return Some(end),
                }
            }
            if !waiting {
                match self.requests() {
                    Ok(p) => progress |= p,
                    Err(end) => return Some(end),
                }
                match self.answers(shared) {
                    Ok(p) => progress |= p,
                    Err(end) => return Some(end),
                }
            }
            let waiting = waiting || matches!(self.rewrite, Rewrite::Asked);
            if waiting || self.spent >= TURN_BYTES {
                // Nothing is read while a rewrite is awaited; past the turn's budget, the next reads are the next turn's.
            } else if self.broker_readable && self.splice_left > 0 {
                match self.splice_in() {
                    Ok(p) => progress |= p,
                    Err(end) => return Some(end),
                }
            } else if self.broker_readable
                && self.bin.has_room()
                && Conn::pending_out(&self.cout, self.cout_at) < self.limit
            {
                // A Fetch answer (and one that goes on as it arrives), a little at a time: the look after each
                // receive finds the next partition's record batches before they are read, so that they are spliced,
                // not copied (and their place in `bin` is never touched).
                // (Not an answer that goes on whole: a tenant's Fetch by name, renamed once it has come.)
                let fetch = self.in_flight.front().is_some_and(|sent| {
                    (sent.1 >> 16) as u16 as i16 == FETCH && self.table.get(&sent.1).is_some_and(|e| e.records.is_some())
                });
                let (want, most) =
                    if self.streamed > 0 || fetch { (READ_CHUNK, READ_CHUNK) } else { (self.wanted(false), usize::MAX) };
                let got = match &self.broker_tls {
                    Some(state) => tls::receive(state, self.broker, &mut self.bin.vec)
                        .map(|(n, cost, drained)| Received { n, cost, drained }),
                    None => self.bin.receive(self.broker, want, most),
                };
                match got {
                    Ok(Received { n: 0, cost: 0, .. }) => {
                        return Some(End::BrokerClosed("upstream broker closed the connection".into()));
                    }
                    Ok(got) => {
                        progress = true;
                        self.spent += got.cost;
                        // With one answer owed at most, the broker says nothing more until the next request. With
                        // more owed, the next answer may be on its way: a look costs less than a wait.
                        self.broker_readable = !(got.drained && self.in_flight.len() <= 1) || self.broker_hup;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.broker_readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Some(End::BrokerClosed(e.to_string())),
                }
            }
            if self.client_readable
                && !waiting
                && self.spent < TURN_BYTES
                && !self.hold
                && !self.client_eof
                && Conn::pending_out(&self.bout, self.bout_at) < self.limit
                && self.cin.len() < self.limit.max(self.frame_size(true))
            {
                let want = self.wanted(true);
                let in_flight = self.in_flight.len();
                let got = match &self.tls {
                    Some(state) => {
                        tls::receive(state, self.client, &mut self.cin).map(|(n, cost, drained)| Received { n, cost, drained })
                    }
                    None => receive(self.client, &mut self.cin, want, usize::MAX),
                };
                match got {
                    Ok(Received { n: 0, cost: 0, .. }) => {
                        self.client_eof = true;
                        progress = true;
                    }
                    Ok(got) => {
                        progress = true;
                        self.spent += got.cost;
                        // A client owed nothing sent what it had to send (one at a time, or a burst read whole); one
                        // that pipelines may be sending more.
                        self.client_readable = !(got.drained && in_flight == 0) || self.client_hup;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.client_readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Some(End::ClientFailed(e.to_string())),
                }
            }
            if !progress {
                break;
            }
            self.published.last_active_ns.store(shared.now_ns(), Ordering::Relaxed);
            if self.spent >= TURN_BYTES {
                self.more = true; // the rest is the next turn's, after the others'
                break;
            }
        }
        self.published.in_flight.store(self.in_flight.len(), Ordering::Relaxed);
        if std::mem::take(&mut self.spans_waiting) {
            // Told once per batch: the records that come before Python takes them wait with the first.
            shared.spans_ready.lock().unwrap_or_else(|e| e.into_inner()).push(self.id);
            shared.notify_python();
        }
        for buf in [&mut self.cin, &mut self.cout, &mut self.bout] {
            // Grown with traffic up to receive_buffer_bytes and kept, as the Python path's buffers are; a larger
            // frame's room is let go once it has gone.
            if buf.is_empty() && buf.capacity() > self.limit {
                *buf = Vec::new();
            }
        }
        self.bin.let_go(self.limit);
        if self.in_flight.is_empty() && self.cin.is_empty() && self.bin.is_empty() {
            // Quiet: a connection idle here holds no room for its next request or answer (a receive makes it again).
            self.cin = Vec::new();
            self.bin.let_go(0);
        }
        let flushed = self.bout_at == self.bout.len()
            && self.cout_at == self.cout.len()
            && self.piped == 0
            && !self.tls.as_ref().is_some_and(tls::pending)
            && !self.broker_tls.as_ref().is_some_and(tls::pending);
        if flushed && self.hold && self.streamed == 0 && matches!(self.rewrite, Rewrite::No) {
            // The next request (or a drain) is Python's: everything read before it has been sent on, and the
            // answers not yet read go back with it (Python's pumps read them, in order, before its answer). An
            // answer partly sent on as it arrived is finished first: Python would send it again whole; one Python is
            // rewriting is written first (its rewrite has run: the session would run it again).
            return Some(End::Yield);
        }
        if !(flushed && self.in_flight.is_empty()) {
            return None;
        }
        if self.client_eof {
            if !self.cin.is_empty() {
                return Some(End::Frame(format!(
                    "connection closed in the middle of a frame ({} bytes)",
                    self.cin.len()
                )));
            }
            return Some(End::ClientClosed);
        }
        None
    }

    /// The whole frame at the front of `cin` (or `bin`), when its size is known and sane: read room for it.
    fn frame_size(&self, client: bool) -> usize {
        let buf: &[u8] = if client { &self.cin } else { &self.bin };
        if buf.len() < 4 {
            return 0;
        }
        let size = be_i32(buf);
        if size < 0 || size as usize > self.max_frame {
            return 0;
        }
        4 + size as usize
    }

    fn wanted(&self, client: bool) -> usize {
        let have = if client { self.cin.len() } else { self.bin.len() };
        self.frame_size(client).saturating_sub(have).max(READ_CHUNK)
    }
}

fn epoll_add(epfd: i32, fd: i32, token: u64, events: u32) -> io::Result<()> {
    let mut event = libc::epoll_event { events, u64: token };
    // SAFETY: a live epoll_event for the duration of the call.
    if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn finish(shared: &Shared, conn: Conn, end: End) {
    let Conn { id, client, broker, cin, bin, in_flight, requests, responses, epoch, drawn, sampling, mut sampled, .. } = conn;
    // Python's draw for the request it handed over at, when the phase ended before the forwarder looked at it.
    let drawn = drawn.or(sampling.and_then(|s| s.first));
    for fd in [client, broker] {
        // SAFETY: the sockets stay open (Python's) until Python has this phase's outcome, so `fd` is still theirs.
        unsafe { libc::epoll_ctl(shared.epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }
    let yielded = matches!(end, End::Yield);
    let outcome = Outcome {
        drawn: if yielded { drawn } else { None },
        leftover: if yielded { cin } else { Vec::new() },
        broker_leftover: if yielded { bin.into_vec() } else { Vec::new() },
        in_flight: if yielded {
            let now = epoch.elapsed().as_nanos() as u64;
            let outstanding = |&(c, idx, note, read, size, _): &Sent| -> Outstanding {
                (c, (idx >> 16) as u16 as i16, idx as u16 as i16, note, size, now.saturating_sub(read))
            };
            in_flight.iter().map(outstanding).collect()
        } else {
            Vec::new()
        },
        in_flight_sampled: if yielded {
            in_flight.iter().map(|sent| if sent.5 { sampled.pop_front() } else { None }).collect()
        } else {
            Vec::new()
        },
        end,
        requests,
        responses,
    };
    shared.outcomes.lock().unwrap_or_else(|e| e.into_inner()).insert(id, outcome);
    shared.ready.lock().unwrap_or_else(|e| e.into_inner()).push(id);
    shared.notify_python();
}

/// The forwarder's thread: every connection it holds, each in turn. Epoll is edge-triggered, so a connection whose turn
/// ended with work left (`Conn::more`) is remembered in `ready` and has its next turn after every other connection
/// waiting then, and after a look at new events (without waiting for any while some connection has work).
fn run(shared: Arc<Shared>) {
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut ready: VecDeque<u64> = VecDeque::new(); // connections waiting for a turn, in the order they take them
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS];
    loop {
        let timeout = if ready.is_empty() { -1 } else { 0 };
        // SAFETY: the kernel fills at most EVENTS entries of a live buffer.
        let n = unsafe { libc::epoll_wait(shared.epfd, events.as_mut_ptr(), EVENTS as i32, timeout) };
        if n < 0 {
            continue; // EINTR
        }
        let mut touched: Vec<u64> = Vec::new();
        for event in &events[..n as usize] {
            let (token, flags) = (event.u64, event.events);
            if token == WAKE {
                let mut count: u64 = 0;
                unsafe { libc::read(shared.wake, &mut count as *mut u64 as *mut libc::c_void, 8) };
                let commands = std::mem::take(&mut *shared.commands.lock().unwrap_or_else(|e| e.into_inner()));
                for command in commands {
                    match command {
                        Command::Attach(conn) => {
                            let (id, client, broker) = (conn.id, conn.client, conn.broker);
                            let watch = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
                            let added = epoll_add(shared.epfd, client, id << 1, watch)
                                .and_then(|_| epoll_add(shared.epfd, broker, (id << 1) | 1, watch));
                            match added {
                                Ok(()) => {
                                    conns.insert(id, *conn);
                                    touched.push(id);
                                }
                                Err(_) => {
                                    // Not watched (the kernel's epoll limit): handed back untouched to the pumps.
                                    unsafe {
                                        libc::epoll_ctl(shared.epfd, libc::EPOLL_CTL_DEL, client, std::ptr::null_mut());
                                    }
                                    finish(&shared, *conn, End::Yield)
                                }
                            }
                        }
                        Command::Hold(id) => {
                            if let Some(conn) = conns.get_mut(&id) {
                                conn.hold = true;
                                touched.push(id);
                            }
                        }
                        Command::Detach(id) => {
                            if let Some(conn) = conns.remove(&id) {
                                finish(&shared, conn, End::Detached);
                            }
                        }
                        Command::Rewritten(id, result) => {
                            if let Some(conn) = conns.get_mut(&id) {
                                if matches!(conn.rewrite, Rewrite::Asked) {
                                    conn.rewrite = Rewrite::Given(result);
                                    touched.push(id);
                                }
                            }
                        }
                    }
                }
                continue;
            }
            let id = token >> 1;
            if let Some(conn) = conns.get_mut(&id) {
                let readable = (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;
                let writable = (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) as u32;
                let broker = token & 1 == 1;
                let hup = flags & ((libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32) != 0;
                if flags & readable != 0 {
                    if broker {
                        conn.broker_readable = true;
                        conn.broker_hup |= hup;
                    } else {
                        conn.client_readable = true;
                        conn.client_hup |= hup;
                    }
                }
                if flags & writable != 0 {
                    if broker {
                        conn.broker_writable = true
                    } else {
                        conn.client_writable = true
                    }
                }
                touched.push(id);
            }
        }
        for id in touched {
            if let Some(conn) = conns.get_mut(&id) {
                if !std::mem::replace(&mut conn.queued, true) {
                    ready.push_back(id);
                }
            }
        }
        // A round: one turn each for the connections waiting now; those with work left go to the back.
        for _ in 0..ready.len() {
            let Some(id) = ready.pop_front() else { break };
            let Some(conn) = conns.get_mut(&id) else { continue }; // ended since it was queued
            conn.queued = false;
            // A bug must cost one connection, never the thread every forwarded connection relies on.
            let end = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.pump(&shared)))
                .unwrap_or_else(|_| Some(End::Protocol("internal error in the forwarder".into())));
            match end {
                Some(end) => {
                    let conn = conns.remove(&id).expect("pumped above");
                    finish(&shared, conn, end);
                }
                None if conn.more => {
                    conn.queued = true;
                    ready.push_back(id);
                }
                None => {}
            }
        }
    }
}

/// One process' forwarder: its thread starts with it and serves every phase handed to it.
#[pyclass(frozen)]
pub struct Forwarder {
    shared: Arc<Shared>,
    next: AtomicU64,
    pipe_bytes: Option<usize>, // each large answer's pipe: None, the kernel's default size (tests ask for less)
}

fn os_error(what: &str) -> PyErr {
    PyOSError::new_err(format!("{what}: {}", io::Error::last_os_error()))
}

#[pymethods]
impl Forwarder {
    #[new]
    #[pyo3(signature = (pipe_bytes=None))]
    fn new(pipe_bytes: Option<usize>) -> PyResult<Self> {
        // SAFETY: plain system calls; each result is checked.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(os_error("epoll_create1"));
        }
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(os_error("eventfd"));
        }
        epoll_add(epfd, wake, WAKE, libc::EPOLLIN as u32).map_err(|e| PyOSError::new_err(e.to_string()))?;
        let notify = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if notify < 0 {
            return Err(os_error("eventfd"));
        }
        let shared = Arc::new(Shared {
            epfd,
            wake,
            notify,
            ready: Mutex::new(Vec::new()),
            spans_ready: Mutex::new(Vec::new()),
            span_bytes: Arc::new(AtomicUsize::new(0)),
            epoch: Instant::now(),
            commands: Mutex::new(Vec::new()),
            outcomes: Mutex::new(HashMap::new()),
            rewrites: Mutex::new(Vec::new()),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("vcproxy-forward".into())
            .spawn(move || run(thread_shared))
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(Forwarder { shared, next: AtomicU64::new(1), pipe_bytes })
    }

    /// Hands a connection to the forwarder until its id is among `finished()`. The sockets are Python's, already
    /// non-blocking, and must stay open until then; `initial` is what the Python path received from the client
    /// and did not take, read first. A request whose size a quota meters (a VC's Produce under a producer's byte rate)
    /// is served only within `allowance`, one whose answer's size it meters (a VC's Fetch under a consumer's) only
    /// while `answer_allowance` has anything left, after the answer of the one before, bounded by what is left (its
    /// max_bytes lowered): without one, none is. With `count` (a request rate), every request served spends one of it,
    /// and none is served once it has none left.
    #[allow(clippy::too_many_arguments)]
    /// With `sampling` (tracing: the sampler's bound, the draw Python made for the first request or None, and whether to
    /// keep spans), a request drawn under the bound is served and its span's record kept for Python
    /// (`Phase.take_spans`) while there is room, else handed back with its draw (`Phase.outcome`).
    /// With `tls`, the client's TLS session (tls.rs), the connection's bytes to and from the client go through it; with
    /// `broker_tls`, the proxy's session to the broker, those to and from the broker.
    #[pyo3(signature = (client, broker, table, max_in_flight, max_frame_bytes, buffer_bytes, initial, grant=None, tally=None, allowance=None, answer_allowance=None, count=None, sampling=None, tls=None, broker_tls=None))]
    fn attach(
        &self,
        client: i32,
        broker: i32,
        table: &ForwardTable,
        max_in_flight: usize,
        max_frame_bytes: usize,
        buffer_bytes: usize,
        initial: &[u8],
        grant: Option<&Grant>,
        tally: Option<&Tally>,
        allowance: Option<&Allowance>,
        answer_allowance: Option<&Allowance>,
        count: Option<&Allowance>,
        sampling: Option<(u128, Option<u64>, bool)>,
        tls: Option<&tls::TlsSession>,
        broker_tls: Option<&tls::TlsSession>,
    ) -> PyResult<Phase> {
        let shared = |session: Option<&tls::TlsSession>| -> PyResult<Option<tls::Shared>> {
            session.map(|s| s.shared().ok_or_else(|| PyValueError::new_err("the TLS handshake is not done"))).transpose()
        };
        let (tls, broker_tls) = (shared(tls)?, shared(broker_tls)?);
        if max_in_flight == 0 {
            return Err(PyValueError::new_err("max_in_flight must be positive"));
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let spans = sampling.filter(|s| s.2).map(|_| Arc::new(Mutex::new(Spans::new(Arc::clone(&self.shared.span_bytes)))));
        let published =
            Arc::new(Published { last_active_ns: AtomicU64::new(self.shared.now_ns()), in_flight: AtomicUsize::new(0) });
        let conn = Conn {
            id,
            client,
            broker,
            tls,
            broker_tls,
            table: Arc::clone(&table.entries),
            grant: grant.map(|g| Arc::clone(&g.inner)),
            allowance: allowance.map(|a| Arc::clone(&a.inner)),
            answer_allowance: answer_allowance.map(|a| Arc::clone(&a.inner)),
            count: count.map(|a| Arc::clone(&a.inner)),
            max_in_flight,
            max_frame: max_frame_bytes,
            limit: buffer_bytes.max(READ_CHUNK),
            cin: initial.to_vec(), // the client's bytes the Python path received and did not take
            bin: Inbound::new(),
            cout: Vec::new(),
            bout: Vec::new(),
            cout_at: 0,
            bout_at: 0,
            in_flight: VecDeque::new(),
            tally: tally.map(|t| Arc::clone(&t.inner)),
            epoch: self.shared.epoch,
            client_readable: true,
            broker_readable: true,
            client_hup: false,
            broker_hup: false,
            client_writable: true,
            broker_writable: true,
            hold: false,
            client_eof: false,
            streamed: 0,
            looked: 0,
            splice_left: 0,
            piped: 0,
            pipe: None,
            spliceable: None,
            pipe_bytes: self.pipe_bytes,
            requests: 0,
            responses: 0,
            published: Arc::clone(&published),
            sampling: sampling.map(|(bound, first, _)| Sampling::new(bound, first)),
            drawn: None,
            spans: spans.clone(),
            sampled: VecDeque::new(),
            spans_waiting: false,
            rewrite: Rewrite::No,
            spent: 0,
            more: false,
            queued: false,
        };
        self.shared.send(Command::Attach(Box::new(conn)));
        Ok(Phase { id, published, shared: Arc::clone(&self.shared), spans })
    }

    /// Nanoseconds since the forwarder's epoch (what a span's record counts its times in).
    fn now_ns(&self) -> u64 {
        self.shared.now_ns()
    }

    /// The eventfd that is readable when phases have ended.
    fn notify_fd(&self) -> i32 {
        self.shared.notify
    }

    /// The ids of the phases whose span records came since the last call to an empty store (`Phase.take_spans`).
    fn spans_ready(&self) -> Vec<u64> {
        std::mem::take(&mut *self.shared.spans_ready.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The answers waiting for Python's rewrite since the last call, as (phase id, API key, version, the answer, a
    /// Fetch's session as its request named it): each phase waits for its `Phase.rewritten` (or `rewrite_failed`).
    #[allow(clippy::type_complexity)]
    fn rewrites<'py>(&self, py: Python<'py>) -> Vec<(u64, i16, i16, Bound<'py, PyBytes>, Note)> {
        let asked = std::mem::take(&mut *self.shared.rewrites.lock().unwrap_or_else(|e| e.into_inner()));
        asked.into_iter().map(|(id, key, version, frame, note)| (id, key, version, PyBytes::new(py, &frame), note)).collect()
    }

    /// The ids of the phases that ended since the last call (their outcomes wait in `Phase.outcome`).
    fn finished(&self) -> Vec<u64> {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from the forwarder's own non-blocking eventfd.
        unsafe { libc::read(self.shared.notify, &mut count as *mut u64 as *mut libc::c_void, 8) };
        std::mem::take(&mut *self.shared.ready.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One connection's time on the forwarder.
#[pyclass(frozen)]
pub struct Phase {
    id: u64,
    published: Arc<Published>,
    shared: Arc<Shared>,
    spans: Option<Arc<Mutex<Spans>>>,
}

#[pymethods]
impl Phase {
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// Read no further requests; end once everything read is answered (a drain).
    fn hold(&self) {
        self.shared.send(Command::Hold(self.id));
    }

    /// End now, whatever is outstanding (the connection is closing).
    fn detach(&self) {
        self.shared.send(Command::Detach(self.id));
    }

    /// Python's rewrite of the answer it was given (`Forwarder.rewrites`): written in its place, and the phase goes on.
    fn rewritten(&self, answer: &Bound<'_, PyAny>) -> PyResult<()> {
        let buffer = PyBuffer::<u8>::get(answer)?;
        let bytes = crate::bytes_of(&buffer)?.to_vec();
        self.shared.send(Command::Rewritten(self.id, Ok(bytes)));
        Ok(())
    }

    /// The answer it was given could not be rewritten (`why`): the phase ends, as the session ends the connection.
    fn rewrite_failed(&self, why: String) {
        self.shared.send(Command::Rewritten(self.id, Err(why)));
    }

    /// Seconds since the last request read or answer written.
    fn idle(&self) -> f64 {
        let last = self.published.last_active_ns.load(Ordering::Relaxed);
        self.shared.now_ns().saturating_sub(last) as f64 / 1e9
    }

    fn in_flight(&self) -> usize {
        self.published.in_flight.load(Ordering::Relaxed)
    }

    /// The records of the sampled requests served since the last call, as (draw, api key, version, correlation id,
    /// read and answered in ns since the forwarder's epoch, the request, the broker's answer or None (an acks=0
    /// Produce), what the client got when it differs or None, the size of what the client got, and whether the
    /// answers are sketches: record batches left out, their lengths kept).
    #[allow(clippy::type_complexity)]
    fn take_spans<'py>(&self, py: Python<'py>) -> Vec<SpanTuple<'py>> {
        let Some(spans) = &self.spans else { return Vec::new() };
        let taken = spans.lock().unwrap_or_else(|e| e.into_inner()).take();
        let bytes = |b: &Vec<u8>| PyBytes::new(py, b);
        taken
            .iter()
            .map(|r| {
                let (upstream, sent) = (r.upstream.as_ref().map(bytes), r.sent.as_ref().map(bytes));
                let request = bytes(&r.request);
                (r.draw, r.key, r.version, r.correlation, r.start, r.end, request, upstream, sent, r.size, r.elided)
            })
            .collect()
    }

    /// Once the phase has ended: (how it ended, why, requests forwarded, answers written, and on a hand-back: the
    /// client's bytes read and not served, the broker's bytes read and not written, the requests sent whose
    /// answers were not written as (correlation id, api key, version, a Fetch's session, size, ns since read, and for
    /// one a span samples: its draw and a copy of it), and the sampling draw of the first request not served, if it was
    /// drawn); None before.
    #[allow(clippy::type_complexity)]
    fn outcome<'py>(
        &self,
        py: Python<'py>,
    ) -> Option<(&'static str, String, u64, u64, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<Adopted<'py>>, Option<u64>)>
    {
        let outcome = self.shared.outcomes.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id)?;
        let (kind, why) = outcome.end.kind();
        Some((
            kind,
            why,
            outcome.requests,
            outcome.responses,
            PyBytes::new(py, &outcome.leftover),
            PyBytes::new(py, &outcome.broker_leftover),
            outcome
                .in_flight
                .into_iter()
                .zip(outcome.in_flight_sampled)
                .map(|((c, key, version, note, size, age), sampled)| {
                    (c, key, version, note, size, age, sampled.map(|(draw, copy)| (draw, PyBytes::new(py, &copy))))
                })
                .collect(),
            outcome.drawn,
        ))
    }
}
