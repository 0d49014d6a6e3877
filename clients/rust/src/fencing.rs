//! [`FencingGate`]: the check a protected resource makes on every write.
//!
//! A lock's token is the revision of its grant, so tokens rise strictly per key. A resource that
//! remembers the highest token it has accepted for a key, and refuses any write carrying a lower
//! one, can never be written by a holder whose lock has moved on (paused, partitioned, or
//! force-released), whatever that holder believes.
//!
//! The gate is bounded: it remembers at most `capacity` keys. When full, it forgets the key whose
//! highest token is the lowest, and raises its **eviction floor** to that token. A key it does not
//! remember accepts only tokens `>=` the floor. Tokens are revisions of one global counter, so this
//! stays safe (a forgotten key's highest token is at most the floor, so nothing below what it
//! accepted can get in); the price is liveness only: a holder of a forgotten key whose grant is
//! older than the floor is refused and must re-acquire. Size `capacity` above the number of keys
//! the resource writes concurrently and this never happens.
//!
//! A semaphore's permits are fenced per slot ([`FencingGate::check_slot`]): each (key, slot)
//! has its own highest token, so a holder of slot 1 never refuses a holder of slot 0, while a
//! superseded holder of a slot (its permit released, expired or force-released, and the slot
//! granted again) is refused once the slot's new holder wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use picket_core::locks::{Token, KEY_LEN_MAX, NAME_LEN_MAX};
use thiserror::Error;

/// Longest key the gate takes: room for `namespace/key`, so memory stays within
/// `capacity * KEY_LEN_MAX_GATE` bytes of keys (twice: the map and its eviction index).
pub const KEY_LEN_MAX_GATE: usize = NAME_LEN_MAX + 1 + KEY_LEN_MAX;

/// A write the gate refused. Nothing was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FencingError {
    #[error("fencing key is {len} bytes long: at most {max} (`namespace/key`)")]
    KeyTooLong { len: usize, max: usize },
    #[error("stale token {token} for `{key}`: a write with token {highest} was already accepted (the lock has moved on; the writer must stop)")]
    Stale {
        key: String,
        token: Token,
        highest: Token,
    },
    #[error("stale token {token} for slot {slot} of semaphore `{key}`: a write with token {highest} was already accepted in that slot (the permit has moved on; the writer must stop)")]
    StaleSlot {
        key: String,
        slot: u32,
        token: Token,
        highest: Token,
    },
    #[error("token {token} for `{key}` is below the gate's eviction floor {floor} (the gate forgot this key to stay within {capacity} keys): re-acquire the lock and retry with the new token")]
    BelowEvictionFloor {
        key: String,
        token: Token,
        floor: Token,
        capacity: usize,
    },
}

/// What the gate fences: a key, or one slot of a semaphore key.
type GateKey = (String, Option<u32>);

#[derive(Debug, Default)]
struct GateState {
    /// key -> the highest token accepted for it. Never decreases for a remembered key.
    highest: BTreeMap<GateKey, Token>,
    /// (highest token, key) for every remembered key: the eviction order.
    by_token: BTreeSet<(Token, GateKey)>,
    /// Every forgotten key's highest token is <= this. Never decreases.
    floor: Token,
}

/// Highest token accepted per key; refuses lower ones. Thread-safe (one mutex), bounded.
#[derive(Debug)]
pub struct FencingGate {
    capacity: usize,
    state: Mutex<GateState>,
}

impl FencingGate {
    /// A gate remembering at most `capacity` keys (`capacity >= 1`).
    pub fn new(capacity: usize) -> FencingGate {
        assert!(capacity >= 1, "a fencing gate needs room for one key");
        FencingGate {
            capacity,
            state: Mutex::new(GateState::default()),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Admits a write to `key` with `token` (and records it) or refuses it. A token equal to the
    /// highest accepted is admitted: one holder writes many times with its token.
    pub fn check(&self, key: &str, token: Token) -> Result<(), FencingError> {
        self.admit(key, None, token)
    }

    /// Admits a write to `key` by the holder of permit `slot` of a semaphore with `token` (and
    /// records it for that slot), or refuses it when a later token was accepted in the same
    /// slot. Slots do not fence each other: N holders write together, each in its own slot.
    pub fn check_slot(&self, key: &str, slot: u32, token: Token) -> Result<(), FencingError> {
        self.admit(key, Some(slot), token)
    }

    fn admit(&self, key: &str, slot: Option<u32>, token: Token) -> Result<(), FencingError> {
        if key.len() > KEY_LEN_MAX_GATE {
            return Err(FencingError::KeyTooLong {
                len: key.len(),
                max: KEY_LEN_MAX_GATE,
            });
        }
        let gate_key: GateKey = (key.to_owned(), slot);
        let mut state = self.lock();
        match state.highest.get(&gate_key).copied() {
            Some(highest) if token < highest => Err(match slot {
                None => FencingError::Stale {
                    key: key.to_owned(),
                    token,
                    highest,
                },
                Some(slot) => FencingError::StaleSlot {
                    key: key.to_owned(),
                    slot,
                    token,
                    highest,
                },
            }),
            Some(highest) => {
                if token > highest {
                    state.by_token.remove(&(highest, gate_key.clone()));
                    state.by_token.insert((token, gate_key.clone()));
                    state.highest.insert(gate_key, token);
                }
                Ok(())
            }
            None if token < state.floor => Err(FencingError::BelowEvictionFloor {
                key: key.to_owned(),
                token,
                floor: state.floor,
                capacity: self.capacity,
            }),
            None => {
                if state.highest.len() == self.capacity {
                    state.evict_lowest();
                }
                state.highest.insert(gate_key.clone(), token);
                state.by_token.insert((token, gate_key));
                state.check_invariants(self.capacity);
                Ok(())
            }
        }
    }

    /// Admits a read of `key` by a shared holder with `token`, or refuses it; records nothing.
    /// A read is refused exactly when a write with a later token was accepted ([`Self::check`]):
    /// a resource that accepted a writer's token refuses every earlier token, a reader's
    /// included, while readers never refuse each other (shared holders' tokens differ; none
    /// of them raises the gate). Readers that also write use [`Self::check`] for the writes.
    pub fn check_read(&self, key: &str, token: Token) -> Result<(), FencingError> {
        if key.len() > KEY_LEN_MAX_GATE {
            return Err(FencingError::KeyTooLong {
                len: key.len(),
                max: KEY_LEN_MAX_GATE,
            });
        }
        let state = self.lock();
        match state.highest.get(&(key.to_owned(), None)).copied() {
            Some(highest) if token < highest => Err(FencingError::Stale {
                key: key.to_owned(),
                token,
                highest,
            }),
            Some(_) => Ok(()),
            None if token < state.floor => Err(FencingError::BelowEvictionFloor {
                key: key.to_owned(),
                token,
                floor: state.floor,
                capacity: self.capacity,
            }),
            None => Ok(()),
        }
    }

    /// The highest token accepted for `key`, if the gate remembers it.
    pub fn highest(&self, key: &str) -> Option<Token> {
        self.lock().highest.get(&(key.to_owned(), None)).copied()
    }

    /// The highest token accepted for `slot` of semaphore `key`, if the gate remembers it.
    pub fn highest_in_slot(&self, key: &str, slot: u32) -> Option<Token> {
        self.lock()
            .highest
            .get(&(key.to_owned(), Some(slot)))
            .copied()
    }

    /// Tokens below this are refused for keys the gate does not remember.
    pub fn eviction_floor(&self) -> Token {
        self.lock().floor
    }

    pub fn len(&self) -> usize {
        self.lock().highest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        // No method panics between two writes of the state, so a poisoned lock still guards a
        // consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl GateState {
    fn evict_lowest(&mut self) {
        let (token, key) = self.by_token.pop_first().expect("a full gate has a key");
        assert_eq!(self.highest.remove(&key), Some(token), "index out of step");
        self.floor = self.floor.max(token);
    }

    fn check_invariants(&self, capacity: usize) {
        assert!(
            self.highest.len() <= capacity,
            "gate holds {} keys, capacity {capacity}",
            self.highest.len()
        );
        assert_eq!(
            self.highest.len(),
            self.by_token.len(),
            "eviction index out of step"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_refuses_its_superseded_holder_and_slots_do_not_refuse_each_other() {
        let gate = FencingGate::new(8);
        // Two permits of `ns/pool`: slot 0 granted at 5, slot 1 at 6.
        assert_eq!(gate.check_slot("ns/pool", 0, Token(5)), Ok(()));
        assert_eq!(gate.check_slot("ns/pool", 1, Token(6)), Ok(()));
        // Slot 0's holder writes on with its lower token: slot 1 does not fence it.
        assert_eq!(gate.check_slot("ns/pool", 0, Token(5)), Ok(()));
        // Slot 0 is granted again (token 9) and its new holder writes.
        assert_eq!(gate.check_slot("ns/pool", 0, Token(9)), Ok(()));
        // The superseded holder of slot 0 is refused; slot 1's holder is not.
        assert_eq!(
            gate.check_slot("ns/pool", 0, Token(5)),
            Err(FencingError::StaleSlot {
                key: "ns/pool".into(),
                slot: 0,
                token: Token(5),
                highest: Token(9),
            })
        );
        assert_eq!(gate.check_slot("ns/pool", 1, Token(6)), Ok(()));
        assert_eq!(gate.highest_in_slot("ns/pool", 0), Some(Token(9)));
        // The slots are apart from the key's own (lock) fencing.
        assert_eq!(gate.highest("ns/pool"), None);
        assert_eq!(gate.check("ns/pool", Token(1)), Ok(()));
        assert_eq!(gate.len(), 3);
    }

    #[test]
    fn a_writers_token_refuses_every_earlier_reader_and_readers_do_not_refuse_each_other() {
        let gate = FencingGate::new(4);
        // Two shared holders (tokens 5 and 6) read, in any order.
        gate.check_read("ns/k", Token(6)).unwrap();
        gate.check_read("ns/k", Token(5)).unwrap();
        assert_eq!(gate.highest("ns/k"), None, "reads record nothing");
        // The writer granted after them (token 9) writes: both readers are refused from now on.
        gate.check("ns/k", Token(9)).unwrap();
        for reader in [Token(5), Token(6)] {
            assert!(matches!(
                gate.check_read("ns/k", reader),
                Err(FencingError::Stale { highest, .. }) if highest == Token(9)
            ));
        }
        // Readers granted after the writer read.
        gate.check_read("ns/k", Token(12)).unwrap();
        gate.check_read("ns/k", Token(9)).unwrap();
    }

    #[test]
    fn refuses_lower_admits_equal_and_higher() {
        let gate = FencingGate::new(8);
        assert_eq!(gate.check("k", Token(5)), Ok(()));
        assert_eq!(gate.check("k", Token(5)), Ok(()));
        assert_eq!(
            gate.check("k", Token(4)),
            Err(FencingError::Stale {
                key: "k".into(),
                token: Token(4),
                highest: Token(5)
            })
        );
        assert_eq!(gate.check("k", Token(9)), Ok(()));
        assert_eq!(gate.highest("k"), Some(Token(9)));
        assert!(gate.check("k", Token(5)).is_err());
        // Keys are independent.
        assert_eq!(gate.check("other", Token(1)), Ok(()));
        let message = gate.check("k", Token(2)).unwrap_err().to_string();
        assert!(
            message.contains("stale token t2") && message.contains("t9"),
            "{message}"
        );
    }

    #[test]
    fn eviction_keeps_the_bound_and_raises_the_floor() {
        let gate = FencingGate::new(2);
        gate.check("a", Token(3)).unwrap();
        gate.check("b", Token(7)).unwrap();
        gate.check("c", Token(5)).unwrap();
        assert_eq!(gate.len(), 2);
        assert_eq!(gate.highest("a"), None, "the lowest key is forgotten");
        assert_eq!(gate.eviction_floor(), Token(3));
        // A forgotten key cannot go below what it accepted.
        assert!(matches!(
            gate.check("a", Token(2)),
            Err(FencingError::BelowEvictionFloor { .. })
        ));
        assert_eq!(gate.check("a", Token(3)), Ok(()));
        assert_eq!(gate.len(), 2);
    }

    #[test]
    fn oversize_keys_are_refused_and_not_recorded() {
        let gate = FencingGate::new(2);
        let key = "k".repeat(KEY_LEN_MAX_GATE + 1);
        assert_eq!(
            gate.check(&key, Token(1)),
            Err(FencingError::KeyTooLong {
                len: KEY_LEN_MAX_GATE + 1,
                max: KEY_LEN_MAX_GATE
            })
        );
        assert!(gate.is_empty());
        assert_eq!(gate.check(&"k".repeat(KEY_LEN_MAX_GATE), Token(1)), Ok(()));
    }

    #[test]
    fn shared_between_threads() {
        let gate = std::sync::Arc::new(FencingGate::new(64));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    for i in 1..=100u64 {
                        let _ = gate.check("shared", Token(i * 4 + t));
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        assert_eq!(gate.highest("shared"), Some(Token(403)));
    }

    #[test]
    #[should_panic(expected = "room for one key")]
    fn zero_capacity_is_refused() {
        let _ = FencingGate::new(0);
    }
}
