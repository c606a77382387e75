//! TLS in rustls, on the client listeners and to the brokers: one session per connection, shared by the Python path
//! (which drives the handshake and reads and writes through it: proxy/net/native_tls.py) and the forwarder
//! (forward.rs), which reads and writes the same session from its thread while it has the connection. OpenSSL's session, inside Python's `ssl`,
//! cannot be handed to another thread's code; this one is a `Mutex` both sides take in turn, so a TLS connection's
//! plain requests can be served by the forwarder like a plaintext one's (docs/security.md, "TLS").
//!
//! Sans-I/O, like the rest: the Python side moves the bytes (`feed`, `outgoing`, `encrypt`), the forwarder uses its own
//! socket calls (`receive`, `flush`). The handshake stops after the ClientHello (rustls' `Acceptor`) so that Python can
//! route by the server name (SNI) before any certificate is chosen, and refuse an unknown one.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::server::{Accepted, Acceptor, WebPkiClientVerifier};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, Connection, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};

create_exception!(vcproxy_native, TlsError, PyException, "A TLS handshake or record the session refuses.");

// Ciphertext taken from the socket per receive, fed to the session piece by piece: rustls' own reads are 4 KiB each.
const RECEIVE_CHUNK: usize = 64 * 1024;
// Plaintext given to the session per flush, so that what waits encrypted stays bounded like `cout` itself.
const ENCRYPT_STEP: usize = 64 * 1024;
// Records after the handshake that decrypt to no data (empty application data, KeyUpdate, which rustls takes without
// end when they alternate: its own limits count each kind in a row) cost a decryption, a KeyUpdate a key derivation,
// and move nothing: past this many of their bytes in a row, the peer is flooding and its connection ends.
const BARREN_MOST: usize = 256 * 1024;

thread_local! {
    static CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A listener's TLS settings (proxy/config.py `ListenerTlsConfig`): its certificate chain and key, and the CAs that
/// sign client certificates with Kafka's `ssl.client.auth` (none, requested, required). TLS 1.2 and 1.3, as the
/// OpenSSL context (proxy/auth/tls.py `server_context`).
#[pyclass(frozen)]
pub struct TlsConfig {
    config: Arc<ServerConfig>,
}

fn refused(what: &str, err: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{what}: {err}"))
}

#[pymethods]
impl TlsConfig {
    #[new]
    #[pyo3(signature = (chain, key, ca=None, client_auth="none"))]
    fn new(chain: &[u8], key: &[u8], ca: Option<&[u8]>, client_auth: &str) -> PyResult<Self> {
        let certs = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| refused("certificate chain", e))?;
        if certs.is_empty() {
            return Err(PyValueError::new_err("certificate chain: no certificate in PEM"));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| refused("private key", e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .map_err(|e| refused("protocol versions", e))?;
        let builder = match (client_auth, ca) {
            ("none", _) => builder.with_no_client_auth(),
            (_, None) => return Err(PyValueError::new_err(format!("client_auth {client_auth} needs a CA"))),
            (mode @ ("requested" | "required"), Some(ca)) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider);
                let verifier = if mode == "requested" { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| refused("CA", e))?)
            }
            (other, _) => return Err(PyValueError::new_err(format!("client_auth {other}: none, requested or required"))),
        };
        let config = builder.with_single_cert(certs, key).map_err(|e| refused("certificate and key", e))?;
        Ok(TlsConfig { config: Arc::new(config) })
    }
}

fn roots(ca: &[u8]) -> PyResult<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.map_err(|e| refused("CA", e))?).map_err(|e| refused("CA", e))?;
    }
    Ok(roots)
}

/// The proxy's TLS to the brokers (proxy/config.py `UpstreamTlsConfig`): the CAs that sign their certificates, its own
/// certificate for brokers that ask for one, and whether a broker's certificate must name the host dialled (Kafka's
/// `ssl.endpoint.identification.algorithm`; the chain is checked either way). TLS 1.2 and 1.3, as the OpenSSL context
/// (proxy/auth/tls.py `client_context`).
#[pyclass(frozen)]
pub struct TlsClientConfig {
    config: Arc<ClientConfig>,
}

#[pymethods]
impl TlsClientConfig {
    #[new]
    #[pyo3(signature = (ca, chain=None, key=None, check_hostname=true))]
    fn new(ca: &[u8], chain: Option<&[u8]>, key: Option<&[u8]>, check_hostname: bool) -> PyResult<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(roots(ca)?);
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
            .build()
            .map_err(|e| refused("CA", e))?;
        let verifier: Arc<dyn ServerCertVerifier> =
            if check_hostname { verifier } else { Arc::new(ChainOnly(verifier)) };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .map_err(|e| refused("protocol versions", e))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (chain, key) {
            (Some(chain), key) => {
                let certs = CertificateDer::pem_slice_iter(chain)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| refused("certificate chain", e))?;
                let key = PrivateKeyDer::from_pem_slice(key.unwrap_or(chain)).map_err(|e| refused("private key", e))?;
                builder.with_client_auth_cert(certs, key).map_err(|e| refused("certificate and key", e))?
            }
            (None, _) => builder.with_no_client_auth(),
        };
        Ok(TlsClientConfig { config: Arc::new(config) })
    }
}

/// A broker's certificate checked as WebPKI checks it, all but the name (check_hostname false): a certificate that
/// fails only there is taken, as OpenSSL's context with `check_hostname = False` takes it.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The name is the last thing the verifier checks: failing there, everything before it held.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Where a session's handshake is.
enum Stage {
    Hello(Box<Acceptor>),  // until the ClientHello is whole
    Chosen(Box<Accepted>), // the ClientHello read: Python routes by its server name, then `accept`
    Ready,                 // `TlsSession::state` holds the connection
    Failed,
}

/// A connection's session (a client's, once its ClientHello is accepted; or the proxy's own to a broker), and the
/// plaintext it decrypted that nobody took yet.
pub(crate) struct TlsState {
    conn: Connection,
    plain: Vec<u8>,
    plain_at: usize,
    peer_closed: bool, // a close_notify came: no more plaintext
    barren: usize,     // bytes of records read since the last that had data (`BARREN_MOST`)
}

pub(crate) type Shared = Arc<Mutex<TlsState>>;

fn locked(state: &Shared) -> MutexGuard<'_, TlsState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl TlsState {
    fn shared(conn: Connection) -> Shared {
        Arc::new(Mutex::new(TlsState { conn, plain: Vec::new(), plain_at: 0, peer_closed: false, barren: 0 }))
    }

    /// Decrypts `data` (the client's bytes) into `out`. An error leaves its alert in the session to send.
    fn absorb(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        while !data.is_empty() && !self.peer_closed {
            let read = self.conn.read_tls(&mut data).map_err(|e| e.to_string())?;
            let io = self.conn.process_new_packets().map_err(|e| e.to_string())?;
            let plain = io.plaintext_bytes_to_read();
            if plain > 0 || self.conn.is_handshaking() {
                self.barren = 0;
            } else {
                self.barren += read;
                if self.barren > BARREN_MOST {
                    return Err(format!("{} bytes of records with no data in a row (a flood)", self.barren));
                }
            }
            if plain > 0 {
                let at = out.len();
                out.resize(at + plain, 0);
                self.conn.reader().read_exact(&mut out[at..]).map_err(|e| e.to_string())?;
            }
            if io.peer_has_closed() {
                self.peer_closed = true;
            }
            if read == 0 {
                break;
            }
        }
        Ok(())
    }

    /// The plaintext decrypted before and not taken, moved to `out`.
    fn take_plain(&mut self, out: &mut Vec<u8>) -> usize {
        let n = self.plain.len() - self.plain_at;
        if n > 0 {
            out.extend_from_slice(&self.plain[self.plain_at..]);
        }
        self.plain = Vec::new();
        self.plain_at = 0;
        n
    }

    fn sealed(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut out)?;
        }
        Ok(out)
    }
}

/// One receive for the forwarder: the plaintext the Python path left, else one recv(2) of the socket's ciphertext
/// (`RECEIVE_CHUNK` at most: what a turn of the forwarder costs is bounded) decrypted into `out`. `Ok((n, read,
/// drained))`: `n` bytes of plaintext (possibly none: records with no data, or part of one), `read` bytes taken from the
/// socket, and whether they were all it held, as forward.rs' `Received`; (0, 0, _) at the end of the peer's stream (or
/// its close_notify); `WouldBlock` when the socket holds nothing.
pub(crate) fn receive(state: &Shared, fd: i32, out: &mut Vec<u8>) -> io::Result<(usize, usize, bool)> {
    let mut s = locked(state);
    let left = s.take_plain(out);
    if left > 0 {
        return Ok((left, 0, false));
    }
    CHUNK.with_borrow_mut(|chunk| {
        if chunk.is_empty() {
            chunk.resize(RECEIVE_CHUNK, 0); // once per thread: the forwarder's
        }
        receive_into(&mut s, fd, chunk, out)
    })
}

fn receive_into(s: &mut TlsState, fd: i32, chunk: &mut [u8], out: &mut Vec<u8>) -> io::Result<(usize, usize, bool)> {
    if s.peer_closed {
        return Ok((0, 0, true));
    }
    let n = loop {
        // SAFETY: recv writes at most `chunk.len()` bytes into the live buffer.
        let n = unsafe { libc::recv(fd, chunk.as_mut_ptr() as *mut libc::c_void, chunk.len(), 0) };
        if n >= 0 {
            break n as usize;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    };
    if n == 0 {
        return Ok((0, 0, true));
    }
    let before = out.len();
    s.absorb(&chunk[..n], out).map_err(|why| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {why}")))?;
    if s.peer_closed && out.len() == before {
        return Ok((0, 0, true));
    }
    // No plaintext yet (part of a record, or records with no data): the caller reads again while `drained` is false,
    // a turn at a time; the rest of a record raises the socket's next edge.
    Ok((out.len() - before, n, n < chunk.len()))
}

/// A socket as rustls writes to it: send(2), vectored (sendmsg) for the records it holds.
struct Socket(i32);

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec; // IoSlice is an iovec on unix
        msg.msg_iovlen = bufs.len().min(1024) as _;
        loop {
            // SAFETY: the iovecs point at live slices; MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE.
            let n = unsafe { libc::sendmsg(self.0, &msg, libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Sends `buf` from `at` to the peer through the session: encrypted a step at a time, the records sent as the socket
/// takes them, until everything is out, the socket is full, or `most` bytes were encrypted (a turn's share: the rest
/// waits for the next). False when the socket is full; true otherwise (then `at` tells whether everything went).
pub(crate) fn flush(state: &Shared, fd: i32, buf: &mut Vec<u8>, at: &mut usize, most: usize) -> io::Result<bool> {
    let mut s = locked(state);
    let mut socket = Socket(fd);
    let start = *at;
    loop {
        while s.conn.wants_write() {
            match s.conn.write_tls(&mut socket) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        if *at >= buf.len() {
            buf.clear();
            *at = 0;
            return Ok(true);
        }
        if *at - start >= most {
            return Ok(true);
        }
        let end = buf.len().min(*at + ENCRYPT_STEP);
        let n = s.conn.writer().write(&buf[*at..end])?;
        *at += n;
    }
}

/// Whether records wait in the session to be sent (a reply the session made while reading, or what a full socket did
/// not take).
pub(crate) fn pending(state: &Shared) -> bool {
    locked(state).conn.wants_write()
}

/// One client connection's TLS session (`TlsConfig`), for the Python path and then the forwarder.
#[pyclass(frozen)]
pub struct TlsSession {
    stage: Mutex<Stage>,
    state: Mutex<Option<Shared>>,
    alert: Mutex<Vec<u8>>, // what the acceptor has to send before there is a connection (its refusal)
}

impl TlsSession {
    pub(crate) fn shared(&self) -> Option<Shared> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn ready(&self) -> PyResult<Shared> {
        self.shared().ok_or_else(|| TlsError::new_err("the TLS handshake is not done"))
    }

    fn stage(&self) -> MutexGuard<'_, Stage> {
        self.stage.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl TlsSession {
    #[new]
    fn new() -> Self {
        TlsSession {
            stage: Mutex::new(Stage::Hello(Box::default())),
            state: Mutex::new(None),
            alert: Mutex::new(Vec::new()),
        }
    }

    /// The proxy's own session to a broker at `server_name` (a host name or an IP address), its ClientHello waiting
    /// in `outgoing`.
    #[staticmethod]
    fn client(config: &TlsClientConfig, server_name: &str) -> PyResult<Self> {
        let name = ServerName::try_from(server_name.to_owned()).map_err(|e| refused("server name", e))?;
        let conn = ClientConnection::new(Arc::clone(&config.config), name).map_err(|e| refused("TLS", e))?;
        Ok(TlsSession {
            stage: Mutex::new(Stage::Ready),
            state: Mutex::new(Some(TlsState::shared(conn.into()))),
            alert: Mutex::new(Vec::new()),
        })
    }

    /// The client's bytes: the ClientHello (until `hello` is true), then records; their plaintext is kept for `read`.
    /// Raises TlsError when the session refuses them (its alert, if any, is in `outgoing`).
    fn feed(&self, data: &[u8]) -> PyResult<()> {
        let mut stage = self.stage();
        match &mut *stage {
            Stage::Hello(acceptor) => {
                let mut rest = data;
                while !rest.is_empty() {
                    acceptor.read_tls(&mut rest).map_err(|e| {
                        TlsError::new_err(format!("ClientHello: {e}"))
                    })?;
                    match acceptor.accept() {
                        Ok(None) => {}
                        Ok(Some(accepted)) => {
                            if !rest.is_empty() {
                                // Nothing follows a ClientHello before the server's answer (no early data here).
                                *stage = Stage::Failed;
                                return Err(TlsError::new_err("bytes after the ClientHello before the server's answer"));
                            }
                            *stage = Stage::Chosen(Box::new(accepted));
                            return Ok(());
                        }
                        Err((err, mut alert)) => {
                            let mut out = Vec::new();
                            let _ = alert.write_all(&mut out);
                            *self.alert.lock().unwrap_or_else(|e| e.into_inner()) = out;
                            *stage = Stage::Failed;
                            return Err(TlsError::new_err(err.to_string()));
                        }
                    }
                }
                Ok(())
            }
            Stage::Ready => {
                drop(stage);
                let state = self.ready()?;
                let mut s = locked(&state);
                let mut plain = std::mem::take(&mut s.plain);
                let result = s.absorb(data, &mut plain);
                s.plain = plain;
                result.map_err(TlsError::new_err)
            }
            Stage::Chosen(_) => Err(TlsError::new_err("bytes after the ClientHello before the server's answer")),
            Stage::Failed => Err(TlsError::new_err("the TLS session has failed")),
        }
    }

    /// Whether the ClientHello is whole and waits for `accept` (or a refusal).
    #[getter]
    fn hello(&self) -> bool {
        matches!(*self.stage(), Stage::Chosen(_))
    }

    /// The server name (SNI) the ClientHello asked for.
    #[getter]
    fn server_name(&self) -> Option<String> {
        match &*self.stage() {
            Stage::Chosen(accepted) => accepted.client_hello().server_name().map(str::to_owned),
            _ => None,
        }
    }

    /// Goes on with the handshake under `config` once the ClientHello is whole.
    fn accept(&self, config: &TlsConfig) -> PyResult<()> {
        let mut stage = self.stage();
        let Stage::Chosen(accepted) = std::mem::replace(&mut *stage, Stage::Failed) else {
            return Err(TlsError::new_err("no ClientHello to accept"));
        };
        match accepted.into_connection(Arc::clone(&config.config)) {
            Ok(conn) => {
                *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(TlsState::shared(conn.into()));
                *stage = Stage::Ready;
                Ok(())
            }
            Err((err, mut alert)) => {
                let mut out = Vec::new();
                let _ = alert.write_all(&mut out);
                *self.alert.lock().unwrap_or_else(|e| e.into_inner()) = out;
                Err(TlsError::new_err(err.to_string()))
            }
        }
    }

    /// The records the session has to send now (handshake messages, alerts, replies), in order.
    fn outgoing<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let alert = std::mem::take(&mut *self.alert.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(state) = self.shared() else { return Ok(PyBytes::new(py, &alert)) };
        let mut out = alert;
        out.extend(locked(&state).sealed().map_err(|e| TlsError::new_err(e.to_string()))?);
        Ok(PyBytes::new(py, &out))
    }

    /// `pieces` (bytes-like) encrypted, after any record the session had waiting: one buffer to send.
    fn encrypt<'py>(&self, py: Python<'py>, pieces: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let state = self.ready()?;
        let mut s = locked(&state);
        s.conn.set_buffer_limit(None); // the caller's pieces, all of them (the Python path sends what it holds)
        for piece in pieces.try_iter()? {
            let buffer = PyBuffer::<u8>::get(&piece?)?;
            let bytes = crate::bytes_of(&buffer)?;
            s.conn.writer().write_all(bytes).map_err(|e| TlsError::new_err(e.to_string()))?;
        }
        let out = s.sealed().map_err(|e| TlsError::new_err(e.to_string()))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Up to `most` bytes of the plaintext decrypted and not yet taken (empty when none is).
    fn read<'py>(&self, py: Python<'py>, most: usize) -> PyResult<Bound<'py, PyBytes>> {
        let Some(state) = self.shared() else { return Ok(PyBytes::new(py, b"")) };
        let mut s = locked(&state);
        let end = s.plain.len().min(s.plain_at + most);
        let out = PyBytes::new(py, &s.plain[s.plain_at..end]);
        s.plain_at = end;
        if s.plain_at == s.plain.len() {
            s.plain = Vec::new();
            s.plain_at = 0;
        }
        Ok(out)
    }

    /// Whether the client said close_notify.
    #[getter]
    fn peer_closed(&self) -> bool {
        self.shared().is_some_and(|state| locked(&state).peer_closed)
    }

    #[getter]
    fn handshaking(&self) -> bool {
        self.shared().is_none_or(|state| locked(&state).conn.is_handshaking())
    }

    /// The client's certificate (DER), if it gave one.
    #[getter]
    fn peer_certificate<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let state = self.shared()?;
        let s = locked(&state);
        s.conn.peer_certificates().and_then(|chain| chain.first()).map(|der| PyBytes::new(py, der))
    }

    /// The protocol version agreed ("TLSv1.3"), for the logs.
    #[getter]
    fn version(&self) -> Option<String> {
        let state = self.shared()?;
        let s = locked(&state);
        s.conn.protocol_version().map(|v| format!("{v:?}").replace("TLSv1_", "TLSv1."))
    }

    /// Queues a close_notify (sent with `outgoing`).
    fn close(&self) {
        if let Some(state) = self.shared() {
            locked(&state).conn.send_close_notify();
        }
    }
}
