//! The leader's group commit, as a state machine without I/O: requests queue while a batch is
//! in flight; the next batch takes everything that queued (up to a bound); a batch is committed,
//! and its requests answered, once the leader's own write is synced **and** one follower has
//! acknowledged it (2 of 3 durable). One batch is in flight at a time, so the batches are the
//! requests that arrived while the previous commit ran.

/// A client's request, by connection and the id the client gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub conn: usize,
    pub id: u64,
}

/// A batch to write locally and send to both followers.
#[derive(Debug, PartialEq, Eq)]
pub struct Batch {
    /// Numbers rise by one from 1; a follower acknowledges a batch by its number.
    pub number: u64,
    pub requests: Vec<Request>,
}

#[derive(Debug)]
struct InFlight {
    batch: Batch,
    synced: bool,
    acked: bool,
}

/// The leader's answer to a request above the pending bound.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy {
    pub pending_max: usize,
}

#[derive(Debug)]
pub struct GroupCommit {
    /// Never longer than `pending_max` (each client has one request in flight, so a longer
    /// queue means a client pipelines, which the probe does not measure).
    pending: Vec<Request>,
    pending_max: usize,
    in_flight: Option<InFlight>,
    /// The number of the last batch handed out; never decreases.
    batch_number_last: u64,
    batch_requests_max: usize,
}

impl GroupCommit {
    pub fn new(batch_requests_max: usize, pending_max: usize) -> GroupCommit {
        assert!(batch_requests_max > 0, "a batch holds at least one request");
        GroupCommit {
            pending: Vec::new(),
            pending_max,
            in_flight: None,
            batch_number_last: 0,
            batch_requests_max,
        }
    }

    /// Queues `request` for the next batch, unless the queue is at its bound.
    pub fn on_request(&mut self, request: Request) -> Result<(), Busy> {
        if self.pending.len() >= self.pending_max {
            return Err(Busy {
                pending_max: self.pending_max,
            });
        }
        self.pending.push(request);
        Ok(())
    }

    /// The next batch, when none is in flight and requests wait: the oldest of them, up to the
    /// bound, in arrival order.
    pub fn next_batch(&mut self) -> Option<&Batch> {
        if self.in_flight.is_some() || self.pending.is_empty() {
            return None;
        }
        let take = self.pending.len().min(self.batch_requests_max);
        let requests: Vec<Request> = self.pending.drain(..take).collect();
        self.batch_number_last += 1;
        self.in_flight = Some(InFlight {
            batch: Batch {
                number: self.batch_number_last,
                requests,
            },
            synced: false,
            acked: false,
        });
        self.in_flight.as_ref().map(|f| &f.batch)
    }

    /// The leader's own write of batch `number` is durable. Answers the requests to reply to
    /// when that commits the batch.
    pub fn on_synced(&mut self, number: u64) -> Option<Vec<Request>> {
        let flight = self
            .in_flight
            .as_mut()
            .expect("a sync is only reported for the batch in flight");
        assert_eq!(
            flight.batch.number, number,
            "synced batch {number}, but batch {} is in flight",
            flight.batch.number
        );
        assert!(!flight.synced, "batch {number} synced twice");
        flight.synced = true;
        self.commit_if_quorum()
    }

    /// A follower acknowledged batch `number`. The second follower's ack of a committed batch
    /// arrives after it left (stale, ignored); an ack of a batch not yet handed out is a bug.
    pub fn on_ack(&mut self, number: u64) -> Option<Vec<Request>> {
        assert!(
            number <= self.batch_number_last,
            "ack of batch {number}, but only {} were sent",
            self.batch_number_last
        );
        let flight = self.in_flight.as_mut()?;
        if flight.batch.number != number {
            return None;
        }
        flight.acked = true;
        self.commit_if_quorum()
    }

    fn commit_if_quorum(&mut self) -> Option<Vec<Request>> {
        let flight = self.in_flight.as_ref()?;
        if !(flight.synced && flight.acked) {
            return None;
        }
        self.in_flight.take().map(|f| f.batch.requests)
    }

    /// Requests waiting for a batch.
    #[cfg(test)]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(conn: usize, id: u64) -> Request {
        Request { conn, id }
    }

    #[test]
    fn nothing_to_send_without_requests() {
        let mut group = GroupCommit::new(64, 64);
        assert_eq!(group.next_batch(), None);
    }

    #[test]
    fn a_serial_request_is_answered_after_the_sync_and_one_ack() {
        let mut group = GroupCommit::new(64, 64);
        group.on_request(request(0, 1)).unwrap();
        let batch = group.next_batch().unwrap();
        assert_eq!(batch.number, 1);
        assert_eq!(batch.requests, vec![request(0, 1)]);
        assert_eq!(group.on_synced(1), None, "no follower has it yet");
        assert_eq!(group.on_ack(1), Some(vec![request(0, 1)]));
        assert_eq!(group.on_ack(1), None, "the second follower's ack is stale");
    }

    #[test]
    fn an_ack_before_the_leaders_own_sync_waits_for_it() {
        let mut group = GroupCommit::new(64, 64);
        group.on_request(request(3, 9)).unwrap();
        group.next_batch().unwrap();
        assert_eq!(
            group.on_ack(1),
            None,
            "the leader's write is not durable yet"
        );
        assert_eq!(group.on_synced(1), Some(vec![request(3, 9)]));
    }

    #[test]
    fn requests_arriving_during_a_commit_form_the_next_batch() {
        let mut group = GroupCommit::new(64, 64);
        group.on_request(request(0, 1)).unwrap();
        group.next_batch().unwrap();
        // While batch 1 syncs, three more arrive: no second batch while one is in flight.
        for conn in 1..4 {
            group.on_request(request(conn, 1)).unwrap();
        }
        assert_eq!(group.next_batch(), None);
        assert_eq!(group.pending_len(), 3);
        group.on_synced(1);
        assert_eq!(group.on_ack(1), Some(vec![request(0, 1)]));
        let batch = group.next_batch().unwrap();
        assert_eq!(batch.number, 2);
        assert_eq!(
            batch.requests,
            vec![request(1, 1), request(2, 1), request(3, 1)],
            "one batch, in arrival order"
        );
        assert_eq!(group.pending_len(), 0);
    }

    #[test]
    fn a_batch_holds_at_most_the_bound_the_rest_waits() {
        let mut group = GroupCommit::new(2, 64);
        for id in 0..5 {
            group.on_request(request(0, id)).unwrap();
        }
        let first = group.next_batch().unwrap().requests.clone();
        assert_eq!(first, vec![request(0, 0), request(0, 1)]);
        group.on_synced(1);
        group.on_ack(1).unwrap();
        let second = group.next_batch().unwrap().requests.clone();
        assert_eq!(second, vec![request(0, 2), request(0, 3)]);
        assert_eq!(group.pending_len(), 1);
    }

    #[test]
    fn a_late_follower_ack_does_not_commit_the_next_batch() {
        let mut group = GroupCommit::new(64, 64);
        group.on_request(request(0, 1)).unwrap();
        group.next_batch().unwrap();
        group.on_synced(1);
        group.on_ack(1).unwrap();
        group.on_request(request(0, 2)).unwrap();
        group.next_batch().unwrap();
        group.on_synced(2);
        // The slow follower's ack of batch 1 arrives now.
        assert_eq!(group.on_ack(1), None);
        assert_eq!(group.on_ack(2), Some(vec![request(0, 2)]));
    }

    #[test]
    fn a_request_above_the_pending_bound_is_refused() {
        let mut group = GroupCommit::new(64, 2);
        group.on_request(request(0, 1)).unwrap();
        group.on_request(request(1, 1)).unwrap();
        assert_eq!(
            group.on_request(request(2, 1)),
            Err(Busy { pending_max: 2 })
        );
        assert_eq!(group.pending_len(), 2);
        // A batch empties the queue: room again.
        group.next_batch().unwrap();
        group.on_request(request(2, 1)).unwrap();
    }

    #[test]
    #[should_panic(expected = "ack of batch 2, but only 1 were sent")]
    fn an_ack_of_a_batch_never_sent_is_a_bug() {
        let mut group = GroupCommit::new(64, 64);
        group.on_request(request(0, 1)).unwrap();
        group.next_batch().unwrap();
        group.on_ack(2);
    }
}
