//! The leader and follower processes of `probe-commit` (the bench binary re-executed with the
//! hidden `--role`). Blocking sockets and plain threads; each prints `port <n>` on stdout once
//! it listens on 127.0.0.1, and exits when its stdin closes (the parent ended, even by SIGKILL).

use std::fs::File;
use std::io::{self, BufRead, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;

use super::frame;
use super::group::{GroupCommit, Request};
use super::{
    APPEND_PAYLOAD_BYTES_MAX, BATCH_REQUESTS_MAX, CONNECTIONS_MAX, ENTRY_BYTES,
    REQUEST_PAYLOAD_BYTES_MAX,
};

/// Bytes of each process's log file, laid out (written and synced) before the run, so a sync
/// carries the data and no size change (Picket's log preallocates its segments the same way);
/// writes wrap around at its end.
const LOG_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Runs the role `role` names in the directory `dir`. Answers the exit status.
pub fn serve(role: &str, dir: &Path, followers: &[String]) -> i32 {
    exit_when_stdin_closes();
    let result = match role {
        "leader" => leader(dir, followers),
        "follower" => follower(dir),
        other => Err(io::Error::other(format!("unknown role {other:?}"))),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("picket-bench probe-commit {role}: {e}");
            3
        }
    }
}

/// The parent holds our stdin open; when it is gone, so are we.
fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let mut line = String::new();
        while io::stdin().lock().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
        std::process::exit(0);
    });
}

fn announce(listener: &TcpListener) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "port {}", listener.local_addr()?.port())?;
    out.flush()
}

/// A preallocated log file written with positioned writes that wrap at its end.
struct Log {
    file: File,
    at: u64,
}

impl Log {
    fn create(dir: &Path, name: &str) -> io::Result<Log> {
        let file = File::create(dir.join(format!("{name}-{}.log", std::process::id())))?;
        let chunk = vec![0u8; 1024 * 1024];
        for i in 0..LOG_FILE_BYTES / chunk.len() as u64 {
            file.write_all_at(&chunk, i * chunk.len() as u64)?;
        }
        file.sync_all()?;
        Ok(Log { file, at: 0 })
    }

    /// One `pwrite` and one `fdatasync`.
    fn append_durably(&mut self, bytes: &[u8]) -> io::Result<()> {
        assert!(
            bytes.len() as u64 <= LOG_FILE_BYTES,
            "an append of {} bytes does not fit the log",
            bytes.len()
        );
        if self.at + bytes.len() as u64 > LOG_FILE_BYTES {
            self.at = 0;
        }
        self.file.write_all_at(bytes, self.at)?;
        self.at += bytes.len() as u64;
        self.file.sync_data()
    }
}

/// Accepts the leader, then for each append: write + fdatasync, ack.
fn follower(dir: &Path) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut log = Log::create(dir, "follower")?;
    announce(&listener)?;
    let (mut stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut payload = Vec::with_capacity(APPEND_PAYLOAD_BYTES_MAX);
    while let Some(batch) = frame::read(&mut stream, &mut payload, APPEND_PAYLOAD_BYTES_MAX)? {
        log.append_durably(&payload)?;
        stream.write_all(&frame::encode(batch, &[]))?;
    }
    Ok(())
}

/// What the leader's committing thread waits for.
enum Event {
    /// A client connected; replies go to this stream.
    Connected {
        conn: usize,
        stream: TcpStream,
    },
    Request(Request),
    Ack(u64),
    /// A follower's connection failed or closed: the probe cannot go on.
    FollowerLost(String),
}

fn leader(dir: &Path, followers: &[String]) -> io::Result<()> {
    if followers.len() != 2 {
        return Err(io::Error::other(format!(
            "the leader needs two followers, got {followers:?}"
        )));
    }
    let mut log = Log::create(dir, "leader")?;
    let (events_tx, events) = mpsc::channel();
    let mut follower_streams = Vec::new();
    for address in followers {
        let stream = TcpStream::connect(address.as_str())?;
        stream.set_nodelay(true)?;
        let mut acks = stream.try_clone()?;
        let tx = events_tx.clone();
        let address = address.clone();
        std::thread::spawn(move || {
            let mut payload = Vec::new();
            let lost = loop {
                match frame::read(&mut acks, &mut payload, 0) {
                    Ok(Some(batch)) => {
                        if tx.send(Event::Ack(batch)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break format!("follower {address} closed its connection"),
                    Err(e) => break format!("follower {address}: {e}"),
                }
            };
            let _ = tx.send(Event::FollowerLost(lost));
        });
        follower_streams.push(stream);
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    announce(&listener)?;
    std::thread::spawn(move || accept_clients(listener, events_tx));
    commit_loop(&mut log, &mut follower_streams, &events)
}

/// One reader thread per client connection, each turning frames into `Event::Request`.
fn accept_clients(listener: TcpListener, events: mpsc::Sender<Event>) {
    for (conn, stream) in listener.incoming().enumerate() {
        let Ok(stream) = stream else { return };
        if conn >= CONNECTIONS_MAX {
            // Closed at once: the probe's clients are bounded by the same constant.
            continue;
        }
        let Ok(replies) = stream.try_clone() else {
            return;
        };
        let _ = stream.set_nodelay(true);
        if events
            .send(Event::Connected {
                conn,
                stream: replies,
            })
            .is_err()
        {
            return;
        }
        let events = events.clone();
        std::thread::spawn(move || {
            let mut stream = stream;
            let mut payload = Vec::new();
            // A client that closes or sends garbage just stops sending requests.
            while let Ok(Some(id)) =
                frame::read(&mut stream, &mut payload, REQUEST_PAYLOAD_BYTES_MAX)
            {
                if events.send(Event::Request(Request { conn, id })).is_err() {
                    return;
                }
            }
        });
    }
}

/// The committing thread: takes what arrived, sends each batch to both followers, writes and
/// syncs it locally meanwhile, and answers its requests once one follower acknowledged it.
fn commit_loop(
    log: &mut Log,
    followers: &mut [TcpStream],
    events: &mpsc::Receiver<Event>,
) -> io::Result<()> {
    let mut group = GroupCommit::new(BATCH_REQUESTS_MAX, CONNECTIONS_MAX);
    let mut clients: Vec<Option<TcpStream>> = Vec::new();
    let mut append = Vec::with_capacity(frame::HEADER_BYTES + APPEND_PAYLOAD_BYTES_MAX);
    let mut entry = vec![0x5a_u8; ENTRY_BYTES];
    loop {
        // Block for one event, then take everything else that is already there.
        let first = events
            .recv()
            .map_err(|_| io::Error::other("every event source ended"))?;
        for event in std::iter::once(first).chain(events.try_iter()) {
            let committed = match event {
                Event::Connected { conn, stream } => {
                    if clients.len() <= conn {
                        clients.resize_with(conn + 1, || None);
                    }
                    clients[conn] = Some(stream);
                    None
                }
                Event::Request(request) => {
                    group.on_request(request).map_err(|busy| {
                        io::Error::other(format!(
                            "more than {} requests wait: a client sends before its reply",
                            busy.pending_max
                        ))
                    })?;
                    None
                }
                Event::Ack(batch) => group.on_ack(batch),
                Event::FollowerLost(why) => return Err(io::Error::other(why)),
            };
            reply(&mut clients, committed.unwrap_or_default());
        }
        // A loop, not one batch: if a batch commits at its own sync (a follower acked first),
        // the requests already waiting must not wait for another event.
        while let Some(batch) = group.next_batch() {
            let number = batch.number;
            append.clear();
            append.extend_from_slice(&[0; frame::HEADER_BYTES]);
            for request in &batch.requests {
                entry[..8].copy_from_slice(&request.id.to_le_bytes());
                append.extend_from_slice(&entry);
            }
            let payload_len = append.len() - frame::HEADER_BYTES;
            append[..frame::HEADER_BYTES].copy_from_slice(&frame::header(number, payload_len));
            // The followers first, so their syncs run while ours does.
            for follower in followers.iter_mut() {
                follower.write_all(&append)?;
            }
            log.append_durably(&append[frame::HEADER_BYTES..])?;
            reply(&mut clients, group.on_synced(number).unwrap_or_default());
        }
    }
}

/// One reply frame per committed request; a client that went away is forgotten.
fn reply(clients: &mut [Option<TcpStream>], committed: Vec<Request>) {
    for request in committed {
        let slot = &mut clients[request.conn];
        let sent = slot
            .as_mut()
            .map(|stream| stream.write_all(&frame::encode(request.id, &[])));
        if let Some(Err(_)) = sent {
            *slot = None;
        }
    }
}
