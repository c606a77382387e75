//! vcproxy's compiled walker.
//!
//! Python reads each kio schema class once into a plan (proxy/protocol/plans.py: nested tuples) and
//! hands it here; a `Plan` then validates, skips or splices message bodies in one pass without
//! decoding them. Every rule (bounds, error kinds, varint lengths) is the pure-Python walker's, which
//! stays the reference: tests/unit/test_native_walk.py checks the two agree byte for byte.

mod forward;
mod tls;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

const MAX_STRING: u64 = 0x7FFF;

/// One step of a walk. Three families: lenient skips (the splice and layout walks: a short buffer is
/// "truncated"), strict checks (before kio decodes: everything is "malformed", bounded by `end`), and
/// splice captures (fields whose value goes through the translation function).
enum Node {
    Fixed(u64),
    Sized { flexible: bool, prefix: u64 },
    Array { flexible: bool, item: Box<Node> },
    Struct { flexible: bool, steps: Vec<Node> },
    NullStruct(Box<Node>),
    // A compact array that must be empty: skipped when it is (or null), else the walk stops at its count. The
    // forwarder's check of a list of broker endpoints in an answer's last regular field (KIP-932's node_endpoints).
    Empty,
    VFixed(u64),
    VSized { flexible: bool, prefix: u64, nullable: bool, limit: Option<u64>, what: String },
    VArray { flexible: bool, nullable: bool, item: Box<Node>, item_min: u64, fixed: Option<u64> },
    VStruct { flexible: bool, steps: Vec<Node>, tagged: Vec<(u64, Node)>, name: String },
    VNullStruct(Box<Node>),
    PString { flexible: bool, kind: Py<PyAny> },
    PUtf8 { flexible: bool }, // the forwarder's check of a string a decode would read (forward.rs `granted`)
    PRename { flexible: bool, kind: usize }, // a name the forwarder renames by its grant (forward.rs `granted`)
    PUuid { kind: Py<PyAny> },
    PArray { flexible: bool, item: Box<Node> },
    PStruct { flexible: bool, steps: Vec<Node> },
    PError, // an error code the forwarder's tally reads (forward.rs `error_codes`)
}

fn parse(node: &Bound<'_, PyAny>) -> PyResult<Node> {
    let t = node.cast::<PyTuple>()?;
    let tag: String = t.get_item(0)?.extract()?;
    let b = |i: usize| -> PyResult<bool> { t.get_item(i)?.extract() };
    let u = |i: usize| -> PyResult<u64> { t.get_item(i)?.extract() };
    let sub = |i: usize| -> PyResult<Box<Node>> { Ok(Box::new(parse(&t.get_item(i)?)?)) };
    let steps = |i: usize| -> PyResult<Vec<Node>> {
        t.get_item(i)?.cast::<PyTuple>()?.iter().map(|s| parse(&s)).collect()
    };
    Ok(match tag.as_str() {
        "fixed" => Node::Fixed(u(1)?),
        "sized" => Node::Sized { flexible: b(1)?, prefix: u(2)? },
        "array" => Node::Array { flexible: b(1)?, item: sub(2)? },
        "struct" => Node::Struct { flexible: b(1)?, steps: steps(2)? },
        "nstruct" => Node::NullStruct(sub(1)?),
        "empty" => Node::Empty,
        "vfixed" => Node::VFixed(u(1)?),
        "vsized" => Node::VSized {
            flexible: b(1)?,
            prefix: u(2)?,
            nullable: b(3)?,
            limit: t.get_item(4)?.extract()?,
            what: t.get_item(5)?.extract()?,
        },
        "varray" => {
            let item = sub(3)?;
            let fixed = match *item {
                Node::VFixed(size) => Some(size),
                _ => None,
            };
            Node::VArray { flexible: b(1)?, nullable: b(2)?, item, item_min: u(4)?, fixed }
        }
        "vstruct" => {
            let mut tagged = Vec::new();
            for entry in t.get_item(3)?.cast::<PyTuple>()?.iter() {
                let pair = entry.cast::<PyTuple>()?;
                tagged.push((pair.get_item(0)?.extract()?, parse(&pair.get_item(1)?)?));
            }
            Node::VStruct { flexible: b(1)?, steps: steps(2)?, tagged, name: t.get_item(4)?.extract()? }
        }
        "vnstruct" => Node::VNullStruct(sub(1)?),
        "string" => Node::PString { flexible: b(1)?, kind: t.get_item(2)?.unbind() },
        "utf8" => Node::PUtf8 { flexible: b(1)? },
        "rename" => Node::PRename { flexible: b(1)?, kind: t.get_item(2)?.extract()? },
        "uuid" => Node::PUuid { kind: t.get_item(1)?.unbind() },
        "parray" => Node::PArray { flexible: b(1)?, item: sub(2)? },
        "pstruct" => Node::PStruct { flexible: b(1)?, steps: steps(2)? },
        "error" => Node::PError,
        other => return Err(PyValueError::new_err(format!("unknown plan node {other:?}"))),
    })
}

/// Why a walk stopped; turned into the pure walker's exception classes at the boundary.
enum Fail {
    Malformed(String),
    Truncated(&'static str),
    Value(&'static str),
    Py(PyErr),
}

impl From<PyErr> for Fail {
    fn from(err: PyErr) -> Self {
        Fail::Py(err)
    }
}

type Walk<T> = Result<T, Fail>;

fn malformed<T>(msg: impl Into<String>) -> Walk<T> {
    Err(Fail::Malformed(msg.into()))
}

fn be_signed(bytes: &[u8]) -> i64 {
    let mut v: i64 = if bytes[0] & 0x80 != 0 { -1 } else { 0 };
    for &byte in bytes {
        v = (v << 8) | i64::from(byte);
    }
    v
}

// -- lenient: primitives.read_uvarint, walker's skippers ------------------------------------------

/// Up to 6 bytes, as primitives.read_uvarint reads them.
fn uvarint(buf: &[u8], mut off: u64) -> Walk<(u64, u64)> {
    let mut value: u64 = 0;
    let mut shift = 0;
    loop {
        if off >= buf.len() as u64 {
            return Err(Fail::Truncated("unsigned varint past end of buffer"));
        }
        let byte = buf[off as usize];
        off += 1;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, off));
        }
        shift += 7;
        if shift > 35 {
            return Err(Fail::Value("unsigned varint longer than 5 bytes"));
        }
    }
}

fn check(buf: &[u8], off: u64) -> Walk<u64> {
    if off > buf.len() as u64 {
        return Err(Fail::Truncated("field past end of buffer"));
    }
    Ok(off)
}

/// A count: a compact one (minus one) or an int32.
fn count(buf: &[u8], off: u64, flexible: bool) -> Walk<(i64, u64)> {
    if flexible {
        let (c, off) = uvarint(buf, off)?;
        return Ok((c as i64 - 1, off));
    }
    if off + 4 > buf.len() as u64 {
        return Err(Fail::Truncated("int32 past end of buffer"));
    }
    Ok((be_signed(&buf[off as usize..off as usize + 4]), off + 4))
}

/// An array's item count for a splice's walk (null: none), refused when more items than bytes are left.
fn items(buf: &[u8], off: u64, flexible: bool) -> Walk<(i64, u64)> {
    let (n, off) = count(buf, off, flexible)?;
    let room = buf.len() as u64 - off.min(buf.len() as u64);
    if n > 0 && n as u64 > room {
        return malformed(format!("array of {n} items cannot fit in {room} bytes"));
    }
    Ok((n.max(0), off))
}

fn skip_tags(buf: &[u8], off: u64) -> Walk<u64> {
    let (n, mut off) = uvarint(buf, off)?;
    for _ in 0..n {
        let (_tag, o) = uvarint(buf, off)?;
        let (size, o) = uvarint(buf, o)?;
        off = o + size;
        if off > buf.len() as u64 {
            return Err(Fail::Truncated("tagged field past end of buffer"));
        }
    }
    Ok(off)
}

fn skip(node: &Node, buf: &[u8], off: u64) -> Walk<u64> {
    match node {
        Node::Fixed(size) => check(buf, off + size),
        Node::Sized { flexible: true, .. } => {
            let (length, off) = uvarint(buf, off)?;
            check(buf, off + length.saturating_sub(1))
        }
        Node::Sized { prefix, .. } => {
            let (start, end) = (off, off + prefix);
            check(buf, end)?;
            let length = be_signed(&buf[start as usize..end as usize]);
            check(buf, end + length.max(0) as u64)
        }
        Node::Array { flexible, item } => {
            let (n, mut off) = if *flexible {
                let (c, o) = uvarint(buf, off)?;
                (c as i64 - 1, o)
            } else {
                let end = check(buf, off + 4)?;
                (be_signed(&buf[off as usize..end as usize]), end)
            };
            for _ in 0..n.max(0) {
                off = skip(item, buf, off)?;
            }
            Ok(off)
        }
        Node::Struct { flexible, steps } => {
            let mut off = off;
            for step in steps {
                off = skip(step, buf, off)?;
            }
            if !flexible {
                return Ok(off);
            }
            if off < buf.len() as u64 && buf[off as usize] == 0 {
                return Ok(off + 1);
            }
            skip_tags(buf, off)
        }
        Node::NullStruct(inner) => {
            let after = check(buf, off + 1)?;
            if buf[off as usize] == 0xFF {
                Ok(after)
            } else {
                skip(inner, buf, after)
            }
        }
        Node::Empty => {
            let (count, after) = uvarint(buf, off)?;
            Ok(if count <= 1 { after } else { off })
        }
        _ => Err(Fail::Py(PyTypeError::new_err("not a skip plan"))),
    }
}

// -- strict: walker's validators, bounded by the frame's end ---------------------------------------

fn v_uvarint(buf: &[u8], mut off: u64, end: u64) -> Walk<(u64, u64)> {
    let mut value: u64 = 0;
    for shift in [0, 7, 14, 21, 28] {
        if off >= end {
            return malformed("unsigned varint past end of frame");
        }
        let byte = buf[off as usize];
        off += 1;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, off));
        }
    }
    malformed("unsigned varint longer than 5 bytes")
}

fn v_prefix(buf: &[u8], off: u64, end: u64, flexible: bool, size: u64) -> Walk<(i64, u64)> {
    if flexible {
        let (v, off) = v_uvarint(buf, off, end)?;
        return Ok((v as i64 - 1, off));
    }
    if off + size > end {
        return malformed("length past end of frame");
    }
    Ok((be_signed(&buf[off as usize..(off + size) as usize]), off + size))
}

fn validate(node: &Node, buf: &[u8], off: u64, end: u64) -> Walk<u64> {
    match node {
        Node::VFixed(size) => {
            if off + size > end {
                return malformed("field past end of frame");
            }
            Ok(off + size)
        }
        Node::VSized { flexible, prefix, nullable, limit, what } => {
            let (length, off) = v_prefix(buf, off, end, *flexible, *prefix)?;
            if length < 0 {
                if !nullable {
                    return malformed(format!("null {what} where the schema allows none"));
                }
                return Ok(off);
            }
            if let Some(limit) = limit {
                if length as u64 > *limit {
                    return malformed(format!("{what} of {length} bytes (at most {limit})"));
                }
            }
            if off + length as u64 > end {
                return malformed(format!("{what} of {length} bytes past end of frame"));
            }
            Ok(off + length as u64)
        }
        Node::VArray { flexible, nullable, item, item_min, fixed } => {
            let (n, mut off) = v_prefix(buf, off, end, *flexible, 4)?;
            if n < 0 {
                if !nullable {
                    return malformed("null array where the schema allows none");
                }
                return Ok(off);
            }
            let room = end - off;
            if (n as u128) * (*item_min as u128) > room as u128 {
                return malformed(format!("array of {n} items cannot fit in {room} bytes"));
            }
            if let Some(size) = fixed {
                return Ok(off + n as u64 * size);
            }
            for _ in 0..n {
                off = validate(item, buf, off, end)?;
            }
            Ok(off)
        }
        Node::VStruct { flexible, steps, tagged, name } => {
            let mut off = off;
            for step in steps {
                off = validate(step, buf, off, end)?;
            }
            if !flexible {
                return Ok(off);
            }
            if off < end && buf[off as usize] == 0 {
                return Ok(off + 1);
            }
            let (n, mut off) = v_uvarint(buf, off, end)?;
            let room = end - off;
            if (n as u128) * 2 > room as u128 {
                return malformed(format!("{n} tagged fields cannot fit in {room} bytes"));
            }
            for _ in 0..n {
                let (tag, o) = v_uvarint(buf, off, end)?;
                let (size, o) = v_uvarint(buf, o, end)?;
                if o + size > end {
                    return malformed("tagged field past end of frame");
                }
                match tagged.iter().find(|(t, _)| *t == tag) {
                    Some((_, check)) => {
                        validate(check, buf, o, o + size)?;
                    }
                    None => return malformed(format!("unknown tagged field {tag} in {name}")),
                }
                off = o + size;
            }
            Ok(off)
        }
        Node::VNullStruct(inner) => {
            if off >= end {
                return malformed("struct marker past end of frame");
            }
            if buf[off as usize] == 0xFF {
                Ok(off + 1)
            } else {
                validate(inner, buf, off + 1, end)
            }
        }
        _ => Err(Fail::Py(PyTypeError::new_err("not a validation plan"))),
    }
}

// -- splice: splice.py's walk, each captured field through the translation -------------------------

struct Splice<'a, 'py> {
    py: Python<'py>,
    buf: &'a [u8],
    edits: &'a Bound<'py, PyList>,
    translate: &'a Bound<'py, PyAny>,
    uuid: &'a UuidMaker,
    malformed: &'a Bound<'py, PyType>,
}

/// A string field as Kafka encodes it: a compact length (flexible versions) or an int16 one, then its bytes. `raw`
/// is at most MAX_STRING bytes (the caller checks).
fn put_string(out: &mut Vec<u8>, raw: &[u8], flexible: bool) {
    if flexible {
        let mut v = raw.len() as u64 + 1;
        while v >= 0x80 {
            out.push((v & 0x7F) as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    } else {
        out.extend_from_slice(&(raw.len() as i16).to_be_bytes());
    }
    out.extend_from_slice(raw);
}

impl Splice<'_, '_> {
    fn string(&self, off: u64, flexible: bool, kind: &Py<PyAny>) -> Walk<u64> {
        let buf = self.buf;
        let start = off;
        let (length, off) = if flexible {
            let (l, o) = uvarint(buf, off)?;
            (l as i64 - 1, o)
        } else {
            if off + 2 > buf.len() as u64 {
                return Err(Fail::Truncated("int16 past end of buffer"));
            }
            (be_signed(&buf[off as usize..off as usize + 2]), off + 2)
        };
        if length < 0 {
            return Ok(off);
        }
        let end = off + length as u64;
        if end > buf.len() as u64 {
            return Err(Fail::Truncated("string past end of buffer"));
        }
        let raw = &buf[off as usize..end as usize];
        let value = match std::str::from_utf8(raw) {
            Ok(s) => PyString::new(self.py, s).into_any(),
            // Python's own decoder raises the same UnicodeDecodeError the pure path does.
            Err(_) => PyBytes::new(self.py, raw).call_method1("decode", ("utf-8",))?,
        };
        let new = self.translate.call1((kind.bind(self.py), &value))?;
        if new.ne(&value)? {
            let encoded = new.call_method1("encode", ("utf-8",))?;
            let raw = encoded.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes();
            if raw.len() as u64 > MAX_STRING {
                let msg = format!("string of {} bytes (at most {MAX_STRING})", raw.len());
                return Err(Fail::Py(PyErr::from_type(self.malformed.clone(), msg)));
            }
            let mut out = Vec::with_capacity(raw.len() + 5);
            put_string(&mut out, raw, flexible);
            self.edit(start, end, &out)?;
        }
        Ok(end)
    }

    fn uuid(&self, off: u64, kind: &Py<PyAny>) -> Walk<u64> {
        let end = off + 16;
        if end > self.buf.len() as u64 {
            return Err(Fail::Truncated("uuid past end of buffer"));
        }
        let value = self.uuid.make(self.py, &self.buf[off as usize..end as usize])?;
        let new = self.translate.call1((kind.bind(self.py), &value))?;
        // Most ids come back as the very object passed (the VC's own topic): no Python __eq__ call then.
        if !new.is(&value) && new.ne(&value)? {
            let raw = new.getattr("bytes")?;
            self.edit(off, end, raw.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes())?;
        }
        Ok(end)
    }

    fn edit(&self, start: u64, end: u64, replacement: &[u8]) -> PyResult<()> {
        let item = (start, end, PyBytes::new(self.py, replacement));
        self.edits.append(item)
    }

    fn walk(&self, node: &Node, off: u64) -> Walk<u64> {
        let buf = self.buf;
        match node {
            Node::PString { flexible, kind } => self.string(off, *flexible, kind),
            Node::PUuid { kind } => self.uuid(off, kind),
            Node::PArray { flexible, item } => {
                let (n, mut off) = items(buf, off, *flexible)?;
                for _ in 0..n {
                    off = self.walk(item, off)?;
                }
                Ok(off)
            }
            Node::PStruct { flexible, steps } => {
                let mut off = off;
                for step in steps {
                    off = self.walk(step, off)?;
                }
                if *flexible {
                    off = skip_tags(buf, off)?;
                }
                Ok(off)
            }
            other => skip(other, buf, off),
        }
    }
}

/// A compiled plan and the exception classes its failures become.
#[pyclass(frozen, module = "vcproxy_native")]
struct Plan {
    root: Node,
    malformed: Py<PyType>,
    truncated: Py<PyType>,
    uuid: UuidMaker,
}

/// Makes the `uuid.UUID` that `UUID(bytes=raw)` makes (its two slots set, as its `__init__` sets them) without
/// running that `__init__` in the interpreter: a splice builds one per topic id it reads, on every request.
struct UuidMaker {
    class: Py<PyAny>,
    new_object: Py<PyAny>, // object.__new__
    unknown: Py<PyAny>,    // uuid.SafeUUID.unknown
}

impl UuidMaker {
    fn new(py: Python<'_>, class: Py<PyAny>) -> PyResult<Self> {
        let new_object = py.import("builtins")?.getattr("object")?.getattr("__new__")?.unbind();
        let unknown = py.import("uuid")?.getattr("SafeUUID")?.getattr("unknown")?.unbind();
        Ok(UuidMaker { class, new_object, unknown })
    }

    fn make<'py>(&self, py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let bytes: [u8; 16] = raw.try_into().map_err(|_| PyValueError::new_err("a uuid is 16 bytes"))?;
        let value = self.new_object.bind(py).call1((self.class.bind(py),))?;
        let int = u128::from_be_bytes(bytes).into_pyobject(py)?;
        set_slot(&value, pyo3::intern!(py, "int"), int.as_any())?;
        set_slot(&value, pyo3::intern!(py, "is_safe"), self.unknown.bind(py))?;
        Ok(value)
    }
}

/// `object.__setattr__(obj, name, value)`: UUID's own `__setattr__` refuses every write.
fn set_slot(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    // SAFETY: three live references, the GIL held; the call only stores `value` in obj's slot.
    let rc = unsafe { pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), value.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(PyErr::fetch(obj.py()))
    }
}

/// The bytes behind a buffer object (bytes, bytearray, memoryview), held while the buffer is.
fn bytes_of(buffer: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    // SAFETY: the exporter keeps the memory alive and unresized while `buffer` holds it (a bytearray
    // refuses to resize with an export open), and the GIL is held for the whole walk.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) })
}

impl Plan {
    fn raise(&self, py: Python<'_>, fail: Fail) -> PyErr {
        match fail {
            Fail::Malformed(msg) => PyErr::from_type(self.malformed.bind(py).clone(), msg),
            Fail::Truncated(msg) => PyErr::from_type(self.truncated.bind(py).clone(), msg),
            Fail::Value(msg) => PyValueError::new_err(msg),
            Fail::Py(err) => err,
        }
    }
}

#[pymethods]
impl Plan {
    #[new]
    fn new(plan: &Bound<'_, PyAny>, malformed: Py<PyType>, truncated: Py<PyType>, uuid: Py<PyAny>) -> PyResult<Self> {
        let uuid = UuidMaker::new(plan.py(), uuid)?;
        Ok(Plan { root: parse(plan)?, malformed, truncated, uuid })
    }

    /// The offset after the field or entity at `offset` (walker's skippers).
    fn skip(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<u64> {
        let buffer = PyBuffer::<u8>::get(buf)?;
        skip(&self.root, bytes_of(&buffer)?, offset).map_err(|f| self.raise(py, f))
    }

    /// The offset after one valid entity at `offset`, bounded by `end` (walker's validators).
    fn validate(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64, end: u64) -> PyResult<u64> {
        let buffer = PyBuffer::<u8>::get(buf)?;
        let bytes = bytes_of(&buffer)?;
        if end > bytes.len() as u64 {
            return Err(PyValueError::new_err("end past the buffer"));
        }
        validate(&self.root, bytes, offset, end).map_err(|f| self.raise(py, f))
    }

    /// Walks the body at `offset`, appending (start, end, replacement) to `edits` for each captured
    /// field that `translate(kind, value)` changes; the offset after the body (splice.py's walk).
    fn splice(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        offset: u64,
        edits: &Bound<'_, PyList>,
        translate: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let buffer = PyBuffer::<u8>::get(buf)?;
        let walk = Splice {
            py,
            buf: bytes_of(&buffer)?,
            edits,
            translate,
            uuid: &self.uuid,
            malformed: self.malformed.bind(py),
        };
        walk.walk(&self.root, offset).map_err(|f| self.raise(py, f))
    }
}

#[pymodule]
fn vcproxy_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Plan>()?;
    m.add_class::<forward::Forwarder>()?;
    m.add_class::<forward::ForwardTable>()?;
    m.add_class::<forward::Phase>()?;
    m.add_class::<forward::Allowance>()?;
    m.add_class::<forward::Generation>()?;
    m.add_class::<forward::Grant>()?;
    m.add_class::<forward::Tally>()?;
    m.add_class::<tls::TlsConfig>()?;
    m.add_class::<tls::TlsSession>()?;
    m.add_class::<tls::TlsClientConfig>()?;
    m.add("TlsError", m.py().get_type::<tls::TlsError>())?;
    Ok(())
}
