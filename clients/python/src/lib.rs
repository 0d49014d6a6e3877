//! `picket._picket`: the extension module under the Python package `picket`.
//!
//! Everything that makes a lock safe — sessions, keepalives on the session stream, leader
//! following, retries that keep their request ids, self-fencing before the server can expire a
//! session, lost-hold pushes, cancel on drop — is `picket_client`, unchanged. This module
//! only moves calls and answers across the language boundary:
//!
//! - Every call that talks to the cluster is spawned on one tokio runtime per process and
//!   answered as a [`Pending`]: Python's sync layer blocks on it with the GIL released (waking
//!   every 50 ms to let signal handlers run: a `KeyboardInterrupt` cancels it), the asyncio layer
//!   registers a callback that resolves an asyncio future. Cancelling a [`Pending`] aborts its
//!   task, which drops the client library's future: a waiting `lock` leaves the queue through the
//!   library's own cancel-on-drop (a `CancelWait`, and a release of a grant it raced).
//! - Objects that own a session or a lock guard drop it inside the runtime, so the library's
//!   drop behaviour (close the session, release the lock, in the background) holds when Python
//!   collects them.
//! - The runtime belongs to the process that made it: after `fork()` the child makes its own,
//!   and objects made before the fork refuse every call (rule `used_after_fork`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use picket_client::{
    self as pc, ClientError, LostReason, SessionEnd, SessionEvent, SessionState, TlsConfig,
    Transport,
};
use picket_core::locks::Token;
use picket_proto::proto;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

// ---------------------------------------------------------------------------------------------
// The runtime

/// The runtime of the process that made it (pid, runtime). A forked child makes a new one: the
/// parent's worker threads do not exist in the child, and its runtime is leaked, never dropped
/// (dropping it would wait for threads that are not there).
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// Set at interpreter exit: background tasks no longer call into Python.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

fn runtime() -> &'static Runtime {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    match *slot {
        Some((owner, runtime)) if owner == pid => runtime,
        _ => {
            let threads = std::env::var("PICKET_PY_THREADS")
                .ok()
                .and_then(|t| t.parse::<usize>().ok())
                .filter(|t| (1..=64).contains(t))
                .unwrap_or(2);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("picket-client")
                .enable_all()
                .build()
                .expect("the picket client's tokio runtime starts");
            let runtime: &'static Runtime = Box::leak(Box::new(runtime));
            *slot = Some((pid, runtime));
            runtime
        }
    }
}

/// A value dropped inside the runtime: the client library spawns its background close or
/// release from `Drop`, which needs a runtime context (Python drops objects on its own threads).
/// In a forked child the value is forgotten instead: its session belongs to the parent, which
/// still holds it; the child must not close it or release its locks.
struct InRuntime<T> {
    value: Option<T>,
    pid: u32,
}

impl<T> InRuntime<T> {
    fn new(value: T) -> InRuntime<T> {
        InRuntime {
            value: Some(value),
            pid: std::process::id(),
        }
    }

    fn get(&self) -> &T {
        self.value.as_ref().expect("present until dropped")
    }

    fn take(&mut self) -> T {
        self.value.take().expect("present until dropped")
    }
}

impl<T> Drop for InRuntime<T> {
    fn drop(&mut self) {
        let Some(value) = self.value.take() else {
            return;
        };
        if self.pid != std::process::id() {
            std::mem::forget(value);
            return;
        }
        let _entered = runtime().enter();
        drop(value);
    }
}

/// Refuses a call on an object made by another process (before a `fork()`).
fn check_pid(pid: u32) -> PyResult<()> {
    if pid == std::process::id() {
        return Ok(());
    }
    Python::attach(|py| {
        Err(python_error(
            py,
            "used_after_fork",
            "this picket object was made before fork(): its sessions and connections belong \
             to the parent process; make a new picket.Client in the child",
            PyDict::new(py),
        ))
    })
}

/// Runs `callback(args)` on a blocking thread (never on a runtime worker, which must not wait
/// for the GIL), unless the interpreter is exiting.
fn call_python<F>(callback: Arc<Py<PyAny>>, build: F)
where
    F: for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyAny>> + Send + 'static,
{
    if SHUTTING_DOWN.load(Ordering::Relaxed) {
        return;
    }
    tokio::task::spawn_blocking(move || {
        if SHUTTING_DOWN.load(Ordering::Relaxed) {
            return;
        }
        Python::attach(|py| {
            let result = build(py).and_then(|arg| callback.call1(py, (arg,)));
            if let Err(error) = result {
                error.print(py);
            }
        });
    });
}

// ---------------------------------------------------------------------------------------------
// Pending: one call in flight

/// Turns a finished call's value into a Python object (with the GIL, on the waiting thread).
type Convert = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A call that has not run yet.
type CallFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<Convert, ClientError>> + Send + 'static>>;

fn outcome_of(result: Result<Convert, ClientError>) -> Outcome {
    match result {
        Ok(convert) => Outcome::Value(convert),
        Err(error) => Outcome::Failed(error),
    }
}

enum Outcome {
    Value(Convert),
    Failed(ClientError),
    Cancelled,
}

#[derive(Default)]
struct PendingInner {
    /// The call, until it runs: a blocking caller drives it on its own thread, an asyncio one
    /// starts it as a task on the runtime.
    future: Option<CallFuture>,
    done: bool,
    outcome: Option<Outcome>,
    callback: Option<Arc<Py<PyAny>>>,
    abort: Option<AbortHandle>,
}

#[derive(Default)]
struct PendingState {
    inner: Mutex<PendingInner>,
    cv: Condvar,
}

impl PendingState {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the outcome (the first one wins) and wakes the waiters.
    fn finish(&self, outcome: Outcome) {
        let mut inner = self.lock();
        if inner.done {
            drop(inner);
            let _entered = runtime().enter();
            drop(outcome);
            return;
        }
        inner.done = true;
        inner.outcome = Some(outcome);
        inner.abort = None;
        let callback = inner.callback.take();
        drop(inner);
        self.cv.notify_all();
        if let Some(callback) = callback {
            call_python(callback, |py| Ok(py.None().into_bound(py)));
        }
    }
}

impl Drop for PendingState {
    fn drop(&mut self) {
        // An answer nobody took (a KeyboardInterrupt raced the grant): its guard or session is
        // dropped inside the runtime, so the library releases or closes it in the background.
        let (outcome, future) = {
            let mut inner = self.lock();
            (inner.outcome.take(), inner.future.take())
        };
        if outcome.is_some() || future.is_some() {
            let _entered = runtime().enter();
            drop(outcome);
            drop(future);
        }
    }
}

/// A call in flight on the client's runtime. The Python layer waits for it (`block`, or
/// `on_done` from asyncio), then takes its `result` once.
#[pyclass(module = "picket._picket", frozen)]
struct Pending {
    state: Arc<PendingState>,
}

fn spawn<F>(future: F) -> Pending
where
    F: Future<Output = Result<Convert, ClientError>> + Send + 'static,
{
    let state = Arc::new(PendingState::default());
    state.lock().future = Some(Box::pin(future));
    Pending { state }
}

impl Pending {
    /// Runs the call as a task on the runtime, if it has not run yet.
    fn start(&self) {
        let Some(future) = self.state.lock().future.take() else {
            return;
        };
        let finisher = self.state.clone();
        let handle = runtime().spawn(async move {
            let outcome = outcome_of(future.await);
            finisher.finish(outcome);
        });
        let mut inner = self.state.lock();
        if !inner.done {
            inner.abort = Some(handle.abort_handle());
        }
    }
}

fn value<T>(value: T) -> Convert
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    Box::new(move |py| value.into_py_any(py))
}

#[pymethods]
impl Pending {
    /// Waits until the call is answered, with the GIL released; runs signal handlers every
    /// 50 ms. If one raises (`KeyboardInterrupt`), the call is cancelled and that error raised.
    fn block(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // On this thread (one thread wake-up less per call than a task on a worker), unless
        // this thread is one of the runtime's own (a callback calling back in): then as a task.
        let own = if tokio::runtime::Handle::try_current().is_ok() {
            None
        } else {
            self.state.lock().future.take()
        };
        if let Some(mut future) = own {
            let runtime = runtime();
            loop {
                let (back, answer) = py.detach(move || {
                    let answer = runtime.block_on(async {
                        tokio::time::timeout(Duration::from_millis(50), &mut future)
                            .await
                            .ok()
                    });
                    (future, answer)
                });
                future = back;
                if let Some(answer) = answer {
                    self.state.finish(outcome_of(answer));
                    return self.result(py);
                }
                if let Err(error) = py.check_signals() {
                    // Dropped inside the runtime: a waiting lock leaves the queue (CancelWait
                    // in the background), as a cancelled task's does.
                    {
                        let _entered = runtime.enter();
                        drop(future);
                    }
                    self.state.finish(Outcome::Cancelled);
                    return Err(error);
                }
            }
        }
        self.start();
        loop {
            let state = self.state.clone();
            let done = py.detach(move || {
                let inner = state.lock();
                let (inner, _) = state
                    .cv
                    .wait_timeout_while(inner, Duration::from_millis(50), |i| !i.done)
                    .unwrap_or_else(|e| e.into_inner());
                inner.done
            });
            if done {
                return self.result(py);
            }
            if let Err(error) = py.check_signals() {
                self.cancel();
                return Err(error);
            }
        }
    }

    /// Whether the call is answered (or cancelled).
    fn done(&self) -> bool {
        self.state.lock().done
    }

    /// Calls `callback(None)` from a background thread once the call is answered. Answers
    /// `True` (and keeps nothing) if it is answered already.
    fn on_done(&self, callback: Py<PyAny>) -> bool {
        {
            let mut inner = self.state.lock();
            if inner.done {
                return true;
            }
            inner.callback = Some(Arc::new(callback));
        }
        self.start();
        false
    }

    /// Cancels the call: its task is aborted (a waiting lock leaves the queue in the
    /// background). Nothing if it is answered already.
    fn cancel(&self) {
        let (abort, future) = {
            let mut inner = self.state.lock();
            inner.callback = None;
            (inner.abort.take(), inner.future.take())
        };
        if let Some(abort) = abort {
            abort.abort();
        }
        if future.is_some() {
            let _entered = runtime().enter();
            drop(future);
        }
        self.state.finish(Outcome::Cancelled);
    }

    /// The answer (once): the value, or the error raised.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let outcome = {
            let mut inner = self.state.lock();
            if !inner.done {
                return Err(PyRuntimeError::new_err("the call is not answered yet"));
            }
            inner.outcome.take()
        };
        match outcome {
            Some(Outcome::Value(convert)) => {
                let _entered = runtime().enter();
                convert(py)
            }
            Some(Outcome::Failed(error)) => Err(client_error(py, &error)),
            Some(Outcome::Cancelled) => Err(python_error(
                py,
                "cancelled",
                "the call was cancelled",
                PyDict::new(py),
            )),
            None => Err(PyRuntimeError::new_err("the answer was taken already")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// `picket._errors._from_core(kind, message, fields)`: the exception of that kind.
fn python_error(py: Python<'_>, kind: &str, message: &str, fields: Bound<'_, PyDict>) -> PyErr {
    let made = py
        .import("picket._errors")
        .and_then(|m| m.getattr("_from_core"))
        .and_then(|f| f.call1((kind, message, fields)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(error) => error,
    }
}

/// `FailedPrecondition` -> `FAILED_PRECONDITION` (the gRPC status names).
fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn lower_snake(camel: &str) -> String {
    upper_snake(camel).to_ascii_lowercase()
}

fn client_error(py: Python<'_>, error: &ClientError) -> PyErr {
    let fields = PyDict::new(py);
    match error_fields(py, error, &fields) {
        Ok(kind) => python_error(py, kind, &error.to_string(), fields),
        Err(error) => error,
    }
}

fn error_fields(
    py: Python<'_>,
    error: &ClientError,
    fields: &Bound<'_, PyDict>,
) -> PyResult<&'static str> {
    Ok(match error {
        ClientError::NoEndpoints => "no_endpoints",
        ClientError::BadEndpoint { endpoint, reason } => {
            fields.set_item("endpoint", endpoint)?;
            fields.set_item("reason", reason)?;
            "bad_endpoint"
        }
        ClientError::BadCredential { name, reason } => {
            fields.set_item("name", *name)?;
            fields.set_item("reason", reason)?;
            "bad_credential"
        }
        ClientError::BadConfig(reason) => {
            fields.set_item("reason", reason)?;
            "bad_config"
        }
        ClientError::BadTls { what, reason } => {
            fields.set_item("what", *what)?;
            fields.set_item("reason", reason)?;
            "bad_tls"
        }
        ClientError::Unavailable {
            what,
            attempts,
            elapsed_ms,
            last,
            tls_mismatch,
        } => {
            fields.set_item("call", *what)?;
            fields.set_item("attempts", attempts)?;
            fields.set_item("elapsed", *elapsed_ms as f64 / 1000.0)?;
            fields.set_item("last", last)?;
            fields.set_item(
                "tls_mismatch",
                tls_mismatch.map(|m| lower_snake(&format!("{m:?}"))),
            )?;
            fields.set_item("tls_hint", tls_mismatch.map(|m| m.hint()))?;
            "unavailable"
        }
        ClientError::Refused { what, refusal } => {
            fields.set_item("call", *what)?;
            fields.set_item("rule", &refusal.rule)?;
            fields.set_item("code", upper_snake(&format!("{:?}", refusal.code)))?;
            fields.set_item("server_message", &refusal.message)?;
            fields.set_item("field", &refusal.field)?;
            fields.set_item(
                "oldest_available_revision",
                refusal.oldest_available_revision,
            )?;
            "refused"
        }
        ClientError::SessionLost { session_id, reason } => {
            fields.set_item("session_id", session_id)?;
            fields.set_item("reason", lost_reason(py, reason)?)?;
            "session_lost"
        }
        ClientError::LockLost {
            namespace,
            key,
            token,
            reason,
        } => {
            fields.set_item("namespace", namespace)?;
            fields.set_item("key", key)?;
            fields.set_item("token", token)?;
            fields.set_item("reason", lost_reason(py, reason)?)?;
            "lock_lost"
        }
        ClientError::Held {
            namespace,
            key,
            holder_session_id,
            token,
        } => {
            fields.set_item("namespace", namespace)?;
            fields.set_item("key", key)?;
            fields.set_item("holder_session_id", holder_session_id)?;
            fields.set_item("token", token)?;
            "held"
        }
        ClientError::WaitTimedOut {
            namespace,
            key,
            timeout_ms,
        } => {
            fields.set_item("namespace", namespace)?;
            fields.set_item("key", key)?;
            fields.set_item("timeout", *timeout_ms as f64 / 1000.0)?;
            "wait_timed_out"
        }
        ClientError::BadAnswer { what, field } => {
            fields.set_item("call", *what)?;
            fields.set_item("field", *field)?;
            "bad_answer"
        }
        ClientError::Compacted {
            from_revision,
            oldest_available_revision,
        } => {
            fields.set_item("from_revision", from_revision)?;
            fields.set_item("oldest_available_revision", oldest_available_revision)?;
            "compacted"
        }
    })
}

/// A `LostReason` as a dict: `kind`, `message` and the kind's fields.
fn lost_reason<'py>(py: Python<'py>, reason: &LostReason) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("message", reason.to_string())?;
    let kind = match reason {
        LostReason::Revoked => "revoked",
        LostReason::UnknownSession => "unknown_session",
        LostReason::KeepAliveExpired { ttl_ms } => {
            d.set_item("ttl", *ttl_ms as f64 / 1000.0)?;
            "keepalive_expired"
        }
        LostReason::Closed => "closed",
        LostReason::KeepAliveRefused { rule, message } => {
            d.set_item("rule", rule)?;
            d.set_item("server_message", message)?;
            "keepalive_refused"
        }
        LostReason::ForceReleased {
            revision,
            force_release_id,
        } => {
            d.set_item("revision", revision)?;
            d.set_item("force_release_id", force_release_id)?;
            "force_released"
        }
        LostReason::Ended { cause, revision } => {
            d.set_item("revision", revision)?;
            let (cause, id) = match cause {
                SessionEnd::Closed => ("closed", None),
                SessionEnd::Expired => ("expired", None),
                SessionEnd::Revoked { force_release_id } => ("revoked", Some(*force_release_id)),
            };
            d.set_item("cause", cause)?;
            d.set_item("force_release_id", id)?;
            "ended"
        }
    };
    d.set_item("kind", kind)?;
    Ok(d)
}

fn session_state<'py>(py: Python<'py>, state: &SessionState) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match state {
        SessionState::Healthy => d.set_item("state", "healthy")?,
        SessionState::Safe => d.set_item("state", "safe")?,
        SessionState::Jeopardy {
            unacknowledged_for,
            ttl,
            deadline_in,
        } => {
            d.set_item("state", "jeopardy")?;
            d.set_item("unacknowledged_for", unacknowledged_for.as_secs_f64())?;
            d.set_item("ttl", ttl.as_secs_f64())?;
            d.set_item("deadline_in", deadline_in.as_secs_f64())?;
        }
        SessionState::Lost(reason) => {
            d.set_item("state", "lost")?;
            d.set_item("reason", lost_reason(py, reason)?)?;
        }
    }
    Ok(d)
}

// ---------------------------------------------------------------------------------------------
// Messages as proto3 JSON

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(
            &include_bytes!(concat!(env!("OUT_DIR"), "/picket_descriptor.bin"))[..],
        )
        .expect("the descriptor set compiled by build.rs decodes")
    })
}

fn descriptor(name: &str) -> PyResult<prost_reflect::MessageDescriptor> {
    pool()
        .get_message_by_name(&format!("picket.v1.{name}"))
        .ok_or_else(|| PyRuntimeError::new_err(format!("no message picket.v1.{name}")))
}

/// A message as proto3 JSON with the proto field names, every field present, 64-bit integers as
/// numbers and enums by name.
fn to_json<M: prost::Message>(name: &str, message: &M) -> PyResult<String> {
    let dynamic = DynamicMessage::decode(descriptor(name)?, message.encode_to_vec().as_slice())
        .map_err(|e| PyRuntimeError::new_err(format!("{name}: {e}")))?;
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(false);
    let mut serializer = serde_json::Serializer::new(Vec::new());
    dynamic
        .serialize_with_options(&mut serializer, &options)
        .map_err(|e| PyRuntimeError::new_err(format!("{name}: {e}")))?;
    String::from_utf8(serializer.into_inner())
        .map_err(|e| PyRuntimeError::new_err(format!("{name}: {e}")))
}

/// A request from proto3 JSON; an unknown field or a value of the wrong type is a ValueError
/// naming it.
fn from_json<M: prost::Message + Default>(name: &str, json: &str) -> PyResult<M> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let dynamic =
        DynamicMessage::deserialize_with_options(descriptor(name)?, &mut deserializer, &options)
            .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
    M::decode(dynamic.encode_to_vec().as_slice())
        .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))
}

fn json_value<M: prost::Message + Send + 'static>(name: &'static str, message: M) -> Convert {
    Box::new(move |py| to_json(name, &message)?.into_py_any(py))
}

// ---------------------------------------------------------------------------------------------
// Client

/// The cluster handle (`picket.Client` wraps it).
#[pyclass(module = "picket._picket", frozen)]
struct CoreClient {
    client: InRuntime<pc::Client>,
    pid: u32,
}

#[pymethods]
impl CoreClient {
    #[new]
    #[pyo3(signature = (
        endpoints, name, *, host=None, ttl_ms=None, rpc_timeout_ms=None,
        connect_timeout_ms=None, retry_budget_ms=None, wait_slice_ms=None, clock_drift_ppm=None,
        principal=None, roles=None, bearer=None, tls=false, ca_pem=None, cert_pem=None,
        key_pem=None, tls_domain=None, transport="stream"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: Vec<String>,
        name: String,
        host: Option<String>,
        ttl_ms: Option<u64>,
        rpc_timeout_ms: Option<u64>,
        connect_timeout_ms: Option<u64>,
        retry_budget_ms: Option<u64>,
        wait_slice_ms: Option<u64>,
        clock_drift_ppm: Option<u32>,
        principal: Option<String>,
        roles: Option<String>,
        bearer: Option<String>,
        tls: bool,
        ca_pem: Option<Vec<u8>>,
        cert_pem: Option<Vec<u8>>,
        key_pem: Option<Vec<u8>>,
        tls_domain: Option<String>,
        transport: &str,
    ) -> PyResult<CoreClient> {
        let mut config = pc::ClientConfig::new(endpoints, &name);
        if let Some(host) = host {
            config.identity_host = host;
        }
        let ms = Duration::from_millis;
        config.session_ttl = ttl_ms.map(ms);
        if let Some(t) = rpc_timeout_ms {
            config.rpc_timeout = ms(t);
        }
        if let Some(t) = connect_timeout_ms {
            config.connect_timeout = ms(t);
        }
        if let Some(t) = retry_budget_ms {
            config.retry_budget = ms(t);
        }
        if let Some(t) = wait_slice_ms {
            config.wait_slice = ms(t);
        }
        if let Some(ppm) = clock_drift_ppm {
            config.clock_drift_ppm = ppm;
        }
        config.credentials = pc::Credentials {
            principal,
            roles,
            bearer,
        };
        if tls || ca_pem.is_some() || cert_pem.is_some() || key_pem.is_some() {
            config.tls = Some(TlsConfig {
                ca_pem,
                cert_pem,
                key_pem,
                domain_name: tls_domain,
            });
        }
        config.transport = match transport {
            "stream" => Transport::Stream,
            "unary" => Transport::Unary,
            other => {
                return Err(PyValueError::new_err(format!(
                    "transport must be 'stream' or 'unary', not {other:?}"
                )))
            }
        };
        let _entered = runtime().enter();
        let client = pc::Client::new(config).map_err(|e| client_error(py, &e))?;
        Ok(CoreClient {
            client: InRuntime::new(client),
            pid: std::process::id(),
        })
    }

    /// The endpoint currently believed to lead.
    fn leader_guess(&self) -> PyResult<String> {
        check_pid(self.pid)?;
        Ok(self.client.get().leader_guess())
    }

    /// Creates a session; answers a `CoreSession`.
    fn create_session(&self) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let client = self.client.get().clone();
        let pid = self.pid;
        Ok(spawn(async move {
            let session = client.create_session().await?;
            let core = CoreSession {
                session: InRuntime::new(session),
                pid,
            };
            Ok(Box::new(move |py: Python<'_>| Ok(Py::new(py, core)?.into_any())) as Convert)
        }))
    }

    /// An `Admin` call (or `release_raw`) by its method name, with its request as proto3
    /// JSON; answers its response as proto3 JSON.
    fn admin(&self, method: &str, request: &str) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let client = self.client.get().clone();
        macro_rules! calls {
            ($($name:literal => $call:ident($req:ident) -> $resp:ident,)*) => {
                match method {
                    $($name => {
                        let request: proto::$req = from_json(stringify!($req), request)?;
                        Ok(spawn(async move {
                            let response = client.$call(request).await?;
                            Ok(json_value(stringify!($resp), response))
                        }))
                    })*
                    other => Err(PyValueError::new_err(format!("method: no admin call {other:?}"))),
                }
            };
        }
        calls! {
            "inspect" => inspect(InspectRequest) -> KeyInfo,
            "list_holds" => list_holds(ListHoldsRequest) -> ListHoldsResponse,
            "longest_holds" => longest_holds(LongestHoldsRequest) -> LongestHoldsResponse,
            "put_class" => put_class(PutClassRequest) -> PutClassResponse,
            "remove_class" => remove_class(RemoveClassRequest) -> RemoveClassResponse,
            "list_classes" => list_classes(ListClassesRequest) -> ListClassesResponse,
            "set_semaphore" => set_semaphore(SetSemaphoreRequest) -> SetSemaphoreResponse,
            "request_force_release" => request_force_release(RequestForceReleaseRequest) -> RequestForceReleaseResponse,
            "approve_force_release" => approve_force_release(ApproveForceReleaseRequest) -> ApproveForceReleaseResponse,
            "deny_force_release" => deny_force_release(DenyForceReleaseRequest) -> DenyForceReleaseResponse,
            "list_force_releases" => list_force_releases(ListForceReleasesRequest) -> ListForceReleasesResponse,
            "query_audit" => query_audit(QueryAuditRequest) -> QueryAuditResponse,
            "get_replica_status" => get_replica_status(GetReplicaStatusRequest) -> ReplicaStatus,
        }
    }

    /// Follows the lock log: a `CoreWatcher` from `from_revision` (0: the oldest retained), or
    /// from now.
    #[pyo3(signature = (namespace, key_prefix, from_revision, from_now))]
    fn watch(
        &self,
        namespace: Option<String>,
        key_prefix: String,
        from_revision: u64,
        from_now: bool,
    ) -> PyResult<CoreWatcher> {
        check_pid(self.pid)?;
        let client = self.client.get();
        let watcher = if from_now {
            client.watch_from_now(namespace.as_deref(), &key_prefix)
        } else {
            client.watch(namespace.as_deref(), &key_prefix, from_revision)
        };
        Ok(CoreWatcher {
            watcher: Arc::new(tokio::sync::Mutex::new(InRuntime::new(watcher))),
            pid: self.pid,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Session

#[pyclass(module = "picket._picket", frozen)]
struct CoreSession {
    session: InRuntime<pc::Session>,
    pid: u32,
}

#[derive(Clone, Copy)]
enum Mode {
    Exclusive,
    Shared,
    Permit,
}

#[pymethods]
impl CoreSession {
    #[getter]
    fn id(&self) -> u64 {
        self.session.get().id()
    }

    /// The TTL the server granted, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.session.get().ttl().as_secs_f64()
    }

    fn is_alive(&self) -> bool {
        self.session.get().is_alive()
    }

    /// `lost_reason()`: why the session is lost (a dict), or None while alive.
    fn lost_reason(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let reason = self.session.get().lost_signal().borrow().clone();
        reason
            .map(|r| lost_reason(py, &r).map(|d| d.into_any().unbind()))
            .transpose()
    }

    /// The current state as a dict (`state`: healthy, jeopardy, safe, lost).
    fn state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let state = self.session.get().state().borrow().clone();
        Ok(session_state(py, &state)?.into_any().unbind())
    }

    /// Calls `on_event(dict)` from a background thread for every state change and every hold
    /// lost to a force-release (`kind`: `state` or `hold_lost`), then once `kind` `lost` with
    /// the reason when the session is lost.
    fn subscribe(&self, on_event: Py<PyAny>) -> PyResult<()> {
        check_pid(self.pid)?;
        let session = self.session.get();
        let mut events = session.events();
        let mut lost = session.lost_signal();
        let on_event = Arc::new(on_event);
        let on_lost = on_event.clone();
        let rt = runtime();
        rt.spawn(async move {
            while let Some(event) = events.next().await {
                call_python(on_event.clone(), move |py| {
                    let d = match &event {
                        SessionEvent::State(state) => {
                            let d = session_state(py, state)?;
                            d.set_item("kind", "state")?;
                            d
                        }
                        SessionEvent::HoldLost {
                            namespace,
                            key,
                            token,
                            reason,
                        } => {
                            let d = PyDict::new(py);
                            d.set_item("kind", "hold_lost")?;
                            d.set_item("namespace", namespace)?;
                            d.set_item("key", key)?;
                            d.set_item("token", token)?;
                            d.set_item("reason", lost_reason(py, reason)?)?;
                            d
                        }
                    };
                    Ok(d.into_any())
                });
            }
        });
        rt.spawn(async move {
            let reason = match lost.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone(),
                Err(_) => Some(LostReason::Closed),
            };
            if let Some(reason) = reason {
                call_python(on_lost, move |py| {
                    let d = PyDict::new(py);
                    d.set_item("kind", "lost")?;
                    d.set_item("reason", lost_reason(py, &reason)?)?;
                    Ok(d.into_any())
                });
            }
        });
        Ok(())
    }

    /// Takes a lock or a permit; answers a `CoreLock`. `mode`: exclusive, shared or permit;
    /// `wait`: queue until granted (else answer `held` at once); `timeout_ms`: the wait's
    /// server-side deadline.
    #[pyo3(signature = (namespace, key, mode, wait, timeout_ms=None))]
    fn acquire(
        &self,
        namespace: String,
        key: String,
        mode: &str,
        wait: bool,
        timeout_ms: Option<u64>,
    ) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let mode = match mode {
            "exclusive" => Mode::Exclusive,
            "shared" => Mode::Shared,
            "permit" => Mode::Permit,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be 'exclusive', 'shared' or 'permit', not {other:?}"
                )))
            }
        };
        let session = self.session.get().clone();
        let pid = self.pid;
        Ok(spawn(async move {
            let (ns, k) = (namespace.as_str(), key.as_str());
            let timeout = timeout_ms.map(Duration::from_millis);
            let guard = match (mode, wait, timeout) {
                (Mode::Exclusive, false, _) => session.try_lock(ns, k).await,
                (Mode::Exclusive, true, None) => session.lock(ns, k).await,
                (Mode::Exclusive, true, Some(t)) => session.lock_within(ns, k, t).await,
                (Mode::Shared, false, _) => session.try_lock_shared(ns, k).await,
                (Mode::Shared, true, None) => session.lock_shared(ns, k).await,
                (Mode::Shared, true, Some(t)) => session.lock_shared_within(ns, k, t).await,
                (Mode::Permit, false, _) => session.try_acquire_permit(ns, k).await,
                (Mode::Permit, true, None) => session.acquire_permit(ns, k).await,
                (Mode::Permit, true, Some(t)) => session.acquire_permit_within(ns, k, t).await,
            }?;
            let lock = CoreLock {
                namespace,
                key,
                token: guard.token().0,
                slot: guard.slot(),
                session_id: guard.session_id(),
                lost: guard.lost_signal(),
                guard: Mutex::new(Some(InRuntime::new(guard))),
                watcher: Mutex::new(None),
                pid,
            };
            Ok(Box::new(move |py: Python<'_>| Ok(Py::new(py, lock)?.into_any())) as Convert)
        }))
    }

    /// Leaves the queue of `namespace`/`key`; answers `{removed, held_token, revision}`.
    fn cancel_wait(&self, namespace: String, key: String) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let session = self.session.get().clone();
        Ok(spawn(async move {
            let answer = session.cancel_wait(&namespace, &key).await?;
            Ok(Box::new(move |py: Python<'_>| {
                let d = PyDict::new(py);
                d.set_item("removed", answer.removed)?;
                d.set_item("held_token", answer.held_token)?;
                d.set_item("revision", answer.revision)?;
                Ok(d.into_any().unbind())
            }) as Convert)
        }))
    }

    /// Closes the session; answers `(holds_released, waits_removed)`.
    fn close(&self) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let session = self.session.get().clone();
        Ok(spawn(async move {
            let closed = session.close().await?;
            Ok(value((closed.holds_released, closed.waits_removed)))
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Lock

#[pyclass(module = "picket._picket", frozen)]
struct CoreLock {
    #[pyo3(get)]
    namespace: String,
    #[pyo3(get)]
    key: String,
    #[pyo3(get)]
    token: u64,
    #[pyo3(get)]
    slot: Option<u32>,
    #[pyo3(get)]
    session_id: u64,
    lost: tokio::sync::watch::Receiver<Option<LostReason>>,
    /// `None` once released.
    guard: Mutex<Option<InRuntime<pc::LockGuard>>>,
    /// The task that reports the loss to Python; ended at release.
    watcher: Mutex<Option<AbortHandle>>,
    pid: u32,
}

impl CoreLock {
    fn stop_watcher(&self) {
        let watcher = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = watcher {
            watcher.abort();
        }
    }
}

impl Drop for CoreLock {
    fn drop(&mut self) {
        self.stop_watcher();
    }
}

#[pymethods]
impl CoreLock {
    /// Held as far as this client can tell (not released, session alive, not force-released).
    fn is_held(&self) -> bool {
        let guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().is_some_and(|g| g.get().is_held())
    }

    /// Why the lock is lost (a dict), or None.
    fn lost_reason(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let reason = self.lost.borrow().clone();
        reason
            .map(|r| lost_reason(py, &r).map(|d| d.into_any().unbind()))
            .transpose()
    }

    /// Calls `on_lost(reason_dict)` from a background thread when the lock is lost (never after
    /// it is released).
    fn subscribe(&self, on_lost: Py<PyAny>) -> PyResult<()> {
        check_pid(self.pid)?;
        let mut lost = self.lost.clone();
        let on_lost = Arc::new(on_lost);
        let handle = runtime().spawn(async move {
            let reason = match lost.wait_for(Option::is_some).await {
                Ok(reason) => reason.clone(),
                Err(_) => None, // released: the signal is gone
            };
            if let Some(reason) = reason {
                call_python(on_lost, move |py| Ok(lost_reason(py, &reason)?.into_any()));
            }
        });
        let previous = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(handle.abort_handle());
        if let Some(previous) = previous {
            previous.abort();
        }
        Ok(())
    }

    /// Releases the lock; answers None. Raises `lock_lost`/`session_lost` if it was lost
    /// meanwhile, and `released` if released already.
    fn release(&self, py: Python<'_>) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let guard = self.guard.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.stop_watcher();
        let Some(mut guard) = guard else {
            return Err(python_error(
                py,
                "released",
                &format!(
                    "`{}`/`{}` (token {}) was released already",
                    self.namespace, self.key, self.token
                ),
                PyDict::new(py),
            ));
        };
        let guard = guard.take();
        Ok(spawn(async move {
            guard.release().await?;
            Ok(value(()))
        }))
    }
}

// ---------------------------------------------------------------------------------------------
// Watch

#[pyclass(module = "picket._picket", frozen)]
struct CoreWatcher {
    watcher: Arc<tokio::sync::Mutex<InRuntime<pc::Watcher>>>,
    pid: u32,
}

#[pymethods]
impl CoreWatcher {
    /// The next page of events: a JSON list of `picket.v1.Event`s (may be empty).
    fn next_page(&self) -> PyResult<Pending> {
        check_pid(self.pid)?;
        let watcher = self.watcher.clone();
        Ok(spawn(async move {
            let mut watcher = watcher.lock().await;
            let page = watcher
                .value
                .as_mut()
                .expect("present until dropped")
                .next_page()
                .await?;
            Ok(Box::new(move |py: Python<'_>| {
                let events = page
                    .iter()
                    .map(|e| to_json("Event", e))
                    .collect::<PyResult<Vec<_>>>()?;
                format!("[{}]", events.join(",")).into_py_any(py)
            }) as Convert)
        }))
    }

    /// The revision the next page starts at (blocks while a page is being read).
    fn resume_from(&self, py: Python<'_>) -> u64 {
        let watcher = self.watcher.clone();
        py.detach(move || watcher.blocking_lock().get().resume_from())
    }
}

// ---------------------------------------------------------------------------------------------
// FencingGate

/// `picket_client::FencingGate`, as it is: the same checks, the same errors.
#[pyclass(module = "picket._picket", frozen)]
struct CoreFencingGate {
    gate: picket_client::FencingGate,
}

fn fencing_error(py: Python<'_>, error: picket_client::FencingError) -> PyErr {
    use picket_client::FencingError as E;
    let fields = PyDict::new(py);
    let filled: PyResult<&str> = (|| {
        Ok(match &error {
            E::KeyTooLong { len, max } => {
                fields.set_item("length", len)?;
                fields.set_item("max", max)?;
                "key_too_long"
            }
            E::Stale {
                key,
                token,
                highest,
            } => {
                fields.set_item("key", key)?;
                fields.set_item("token", token.0)?;
                fields.set_item("highest", highest.0)?;
                "stale_token"
            }
            E::StaleSlot {
                key,
                slot,
                token,
                highest,
            } => {
                fields.set_item("key", key)?;
                fields.set_item("slot", slot)?;
                fields.set_item("token", token.0)?;
                fields.set_item("highest", highest.0)?;
                "stale_slot_token"
            }
            E::BelowEvictionFloor {
                key,
                token,
                floor,
                capacity,
            } => {
                fields.set_item("key", key)?;
                fields.set_item("token", token.0)?;
                fields.set_item("floor", floor.0)?;
                fields.set_item("capacity", capacity)?;
                "below_eviction_floor"
            }
        })
    })();
    match filled {
        Ok(kind) => python_error(py, kind, &error.to_string(), fields),
        Err(e) => e,
    }
}

#[pymethods]
impl CoreFencingGate {
    #[new]
    fn new(capacity: usize) -> PyResult<CoreFencingGate> {
        if capacity == 0 {
            return Err(PyValueError::new_err(
                "capacity: a fencing gate needs room for at least one key",
            ));
        }
        Ok(CoreFencingGate {
            gate: picket_client::FencingGate::new(capacity),
        })
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.gate.capacity()
    }

    fn check(&self, py: Python<'_>, key: &str, token: u64) -> PyResult<()> {
        self.gate
            .check(key, Token(token))
            .map_err(|e| fencing_error(py, e))
    }

    fn check_slot(&self, py: Python<'_>, key: &str, slot: u32, token: u64) -> PyResult<()> {
        self.gate
            .check_slot(key, slot, Token(token))
            .map_err(|e| fencing_error(py, e))
    }

    fn check_read(&self, py: Python<'_>, key: &str, token: u64) -> PyResult<()> {
        self.gate
            .check_read(key, Token(token))
            .map_err(|e| fencing_error(py, e))
    }

    fn highest(&self, key: &str) -> Option<u64> {
        self.gate.highest(key).map(|t| t.0)
    }

    fn highest_in_slot(&self, key: &str, slot: u32) -> Option<u64> {
        self.gate.highest_in_slot(key, slot).map(|t| t.0)
    }

    fn eviction_floor(&self) -> u64 {
        self.gate.eviction_floor().0
    }
}

/// Called at interpreter exit (atexit): background tasks stop calling into Python.
#[pyfunction]
fn _shutdown() {
    SHUTTING_DOWN.store(true, Ordering::Relaxed);
}

#[pymodule]
fn _picket(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pending>()?;
    m.add_class::<CoreClient>()?;
    m.add_class::<CoreSession>()?;
    m.add_class::<CoreLock>()?;
    m.add_class::<CoreWatcher>()?;
    m.add_class::<CoreFencingGate>()?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add("CLIENT_VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
