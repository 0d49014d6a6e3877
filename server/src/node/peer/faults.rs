//! **Simulation only** (`--cfg madsim`, compiled out of picketd): the frame-fault layer of the
//! peer transport, above the framing, on the receiving end of each connection. madsim's TCP
//! never loses, duplicates or reorders bytes (a clogged link stalls, a killed node shows as the
//! end of the stream), so this is where a seed gets a lossy link: while the buggify points are
//! on ([`crate::node::buggify`]), each message frame received is
//!
//! - dropped with 1% probability (the run's message **loss**);
//! - delivered twice with 2%;
//! - delayed by 1-50 ms with 2% (delivered later, behind frames that came after it);
//! - held back with 3% and delivered after the next frame (a swap with its successor; a ping
//!   or the end of the connection releases it too, so nothing is held indefinitely).
//!
//! Every draw comes from the simulator's seeded RNG, so a seed replays them exactly. Paxos must
//! shrug all of it off (it re-sends what matters).

use std::time::Duration;

use madsim::rand::Rng;

use super::inbound::Inbox;
use crate::node::buggify::{fire, on};
use crate::node::driver::NodeMessage;

/// One connection's frame faults: the frame held back for a swap, if any.
#[derive(Debug, Default)]
pub struct FrameFaults {
    held: Option<NodeMessage>,
}

impl FrameFaults {
    /// Delivers `msg` as a lossy, duplicating, delaying, reordering link would.
    pub(crate) fn pass(&mut self, msg: NodeMessage, inbox: &Inbox) {
        if !on() {
            inbox.deliver(msg);
            return;
        }
        let held = self.held.take();
        if fire(0.01) {
            // Lost.
        } else if fire(0.02) {
            inbox.deliver(msg.clone());
            inbox.deliver(msg);
        } else if fire(0.02) {
            let delay = Duration::from_millis(madsim::rand::thread_rng().gen_range(1..=50));
            let inbox = inbox.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                inbox.deliver(msg);
            });
        } else if held.is_none() && fire(0.03) {
            self.held = Some(msg);
            return;
        } else {
            inbox.deliver(msg);
        }
        if let Some(held) = held {
            inbox.deliver(held);
        }
    }

    /// Delivers the frame held back, if any (another frame arrived, or the connection ends).
    pub(crate) fn release(&mut self, inbox: &Inbox) {
        if let Some(held) = self.held.take() {
            inbox.deliver(held);
        }
    }
}
