//! FencingGate: never accepts a token lower than one it accepted for the same key, whatever the
//! interleaving of keys, tokens and evictions.

use std::collections::BTreeMap;

use picket_client::{FencingError, FencingGate};
use picket_core::locks::Token;
use proptest::collection::vec;
use proptest::prelude::*;

proptest! {
    #[test]
    fn never_accepts_below_an_accepted_token(
        capacity in 1..6usize,
        writes in vec((0..10usize, 0..50u64), 0..200),
    ) {
        let gate = FencingGate::new(capacity);
        let mut accepted: BTreeMap<usize, u64> = BTreeMap::new();
        for (key, token) in writes {
            let name = format!("key-{key}");
            let result = gate.check(&name, Token(token));
            if let Some(&highest) = accepted.get(&key) {
                if token < highest {
                    prop_assert!(result.is_err(), "accepted {token} after {highest} on {name}");
                }
            }
            match result {
                Ok(()) => {
                    let entry = accepted.entry(key).or_insert(token);
                    *entry = (*entry).max(token);
                }
                Err(FencingError::Stale { highest, .. }) => prop_assert!(highest > Token(token)),
                Err(FencingError::BelowEvictionFloor { floor, .. }) => {
                    prop_assert!(floor > Token(token))
                }
                Err(other) => prop_assert!(false, "unexpected {other}"),
            }
            prop_assert!(gate.len() <= capacity);
        }
    }

    /// With room for every key, the gate is exactly "token >= highest accepted".
    #[test]
    fn unbounded_gate_is_the_max_model(writes in vec((0..5usize, 0..50u64), 0..100)) {
        let gate = FencingGate::new(16);
        let mut highest: BTreeMap<usize, u64> = BTreeMap::new();
        for (key, token) in writes {
            let expect_ok = highest.get(&key).is_none_or(|&h| token >= h);
            prop_assert_eq!(gate.check(&format!("k{key}"), Token(token)).is_ok(), expect_ok);
            if expect_ok {
                highest.insert(key, token.max(highest.get(&key).copied().unwrap_or(0)));
            }
        }
    }
}
