//! `failover`: the `lock` workload (sessions through the client library, every client knowing
//! every replica), and at `--kill-at-s` a `kill -9` of the leader. Reports:
//! - **resume**: from the kill to the first grant of an op *started* after the kill (such an op
//!   cannot have been answered by the dead leader), and the longest pause between two grants
//!   around the kill;
//! - **failed**: ops that answered an error (the library retries for its 15 s budget first);
//! - **lost**: acknowledged grants contradicted later: a (key, token) granted twice, or per key a
//!   grant with a lower token acknowledged after one with a higher token (a forgotten grant
//!   re-issued), plus releases refused because the session no longer held the key.
//!
//! stdout: `<system> failover-c<C> <resume_ms> <failed_ops> <lost_ops>`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use picket_client::{Client, ClientError};

use crate::stats::SplitMix64;
use crate::workload::{config, find_leader, key_name, order_for};
use crate::Args;

/// One op as the failover check sees it (times in µs since t0).
#[derive(Clone, Debug)]
struct Op {
    start_us: u64,
    granted_us: u64,
    end_us: u64,
    key: u64,
    token: u64,
}

#[derive(Default)]
struct Outcome {
    ops: Vec<Op>,
    errors: Vec<(u64, String)>,
}

fn since(t0: Instant) -> u64 {
    t0.elapsed().as_micros() as u64
}

/// Grants contradicted by later ones: duplicate (key, token), or per key a token order that
/// disagrees with the order in which the grants were acknowledged.
fn contradicted(ops: &[Op]) -> usize {
    let mut by_key: BTreeMap<u64, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key).or_default().push(op);
    }
    let mut bad = 0;
    for grants in by_key.values_mut() {
        grants.sort_by_key(|op| (op.token, op.granted_us));
        for pair in grants.windows(2) {
            // A holder releases before the next grant of the key is acknowledged, so tokens
            // must rise with the acknowledgement times: the next grant comes after the
            // previous release was sent (granted_us of the next > granted_us of the previous).
            if pair[0].token == pair[1].token || pair[1].granted_us < pair[0].granted_us {
                bad += 1;
            }
        }
    }
    bad
}

pub async fn run(mut args: Args) -> i32 {
    if args.pids.len() != args.endpoints.len() {
        eprintln!(
            "picket-bench failover: --pids needs one PID per endpoint ({} endpoints, {} PIDs)",
            args.endpoints.len(),
            args.pids.len()
        );
        return 64;
    }
    args.target = "leader".into();
    let leader = match find_leader(&args).await {
        Ok(leader) => leader,
        Err(e) => {
            eprintln!("picket-bench: could not find the leader: {e}");
            return 3;
        }
    };
    let Some(index) = args
        .endpoints
        .iter()
        .position(|e| e.trim_start_matches("http://") == leader)
    else {
        eprintln!(
            "picket-bench: leader {leader} is not one of {:?}",
            args.endpoints
        );
        return 3;
    };
    let victim = args.pids[index];
    let mut sessions = Vec::with_capacity(args.clients);
    for i in 0..args.clients {
        let client = match Client::new(config(&args, order_for(&args, Some(&leader), i))) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("picket-bench: client {i}: {e}");
                return 3;
            }
        };
        match client.create_session().await {
            Ok(s) => sessions.push(s),
            Err(e) => {
                eprintln!("picket-bench: setup of client {i}: {e}");
                return 3;
            }
        }
    }
    let t0 = Instant::now();
    let stop_at = t0 + Duration::from_secs_f64(args.warmup_s + args.duration_s);
    let shared = Arc::new(args.clone());
    let mut handles = Vec::new();
    for (i, session) in sessions.into_iter().enumerate() {
        let args = shared.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = SplitMix64::for_client(i);
            let mut out = Outcome::default();
            while Instant::now() < stop_at {
                let k = if args.keys == 1 {
                    0
                } else {
                    rng.next_u64() % args.keys
                };
                let start_us = since(t0);
                let guard = match session.lock(&args.namespace, &key_name(&args, k)).await {
                    Ok(g) => g,
                    Err(e) => {
                        out.errors.push((since(t0), format!("lock: {e}")));
                        if matches!(e, ClientError::SessionLost { .. }) {
                            break;
                        }
                        continue;
                    }
                };
                let granted_us = since(t0);
                let token = guard.token().0;
                match guard.release().await {
                    Ok(_) => out.ops.push(Op {
                        start_us,
                        granted_us,
                        end_us: since(t0),
                        key: k,
                        token,
                    }),
                    Err(e) => out.errors.push((since(t0), format!("release: {e}"))),
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
            out
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.kill_at_s)).await;
    let kill_sent_us = since(t0);
    let status = std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status();
    // The leader is certainly dead once `kill` has returned (SIGKILL is delivered by then);
    // ops started before that may still have been answered by it.
    let killed_us = since(t0);
    eprintln!(
        "# failover: kill -9 of leader {leader} (PID {victim}) from t0+{:.3}s to t0+{:.3}s: {status:?}",
        kill_sent_us as f64 / 1e6,
        killed_us as f64 / 1e6
    );
    let hard = Duration::from_secs_f64(args.warmup_s + args.duration_s + args.grace_s);
    let mut outcome = Outcome::default();
    for handle in handles {
        match tokio::time::timeout(hard, handle).await {
            Ok(Ok(o)) => {
                outcome.ops.extend(o.ops);
                outcome.errors.extend(o.errors);
            }
            Ok(Err(e)) => outcome.errors.push((since(t0), format!("task: {e}"))),
            Err(_) => {
                eprintln!("picket-bench: hard deadline exceeded, aborting");
                return 4;
            }
        }
    }
    summarize(&args, killed_us, &outcome)
}

fn summarize(args: &Args, killed_us: u64, outcome: &Outcome) -> i32 {
    let resume = outcome
        .ops
        .iter()
        .filter(|op| op.start_us >= killed_us)
        .map(|op| op.granted_us)
        .min();
    let mut grants: Vec<u64> = outcome.ops.iter().map(|op| op.granted_us).collect();
    grants.sort_unstable();
    // The longest pause between two consecutive grants (of any client) in the whole run.
    let longest_pause = grants
        .windows(2)
        .map(|pair| (pair[1] - pair[0], pair[0]))
        .max();
    let not_holder = outcome
        .errors
        .iter()
        .filter(|(_, e)| e.starts_with("release") && e.contains("not_holder"))
        .count();
    let lost = contradicted(&outcome.ops) + not_holder;
    let before = grants.iter().filter(|&&g| g <= killed_us).count();
    let after = grants.len() - before;
    let resume_ms = resume.map_or(f64::NAN, |r| (r - killed_us) as f64 / 1000.0);
    println!(
        "{} failover-c{} {:.1} {} {}",
        args.system,
        args.clients,
        resume_ms,
        outcome.errors.len(),
        lost
    );
    eprintln!(
        "# {} failover-c{}: keys={} grants before kill={} after={} resume_ms={:.1} \
         longest_pause_between_grants_ms={:.1} (from t0+{:.3}s) failed_ops={} lost_acknowledged={} \
         (not_holder releases {})",
        args.system,
        args.clients,
        args.keys,
        before,
        after,
        resume_ms,
        longest_pause.map_or(f64::NAN, |(gap, _)| gap as f64 / 1000.0),
        longest_pause.map_or(f64::NAN, |(_, at)| at as f64 / 1e6),
        outcome.errors.len(),
        lost,
        not_holder
    );
    for (at, e) in outcome.errors.iter().take(5) {
        eprintln!("# error at t0+{:.3}s: {e}", *at as f64 / 1e6);
    }
    if outcome.ops.iter().any(|op| op.end_us < op.granted_us) {
        eprintln!("# inconsistent op times (clock?)");
    }
    if resume.is_none() {
        5
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: u64, token: u64, granted_us: u64) -> Op {
        Op {
            start_us: 0,
            granted_us,
            end_us: granted_us + 1,
            key,
            token,
        }
    }

    #[test]
    fn rising_tokens_per_key_are_consistent() {
        let ops = [op(1, 5, 10), op(1, 9, 20), op(2, 6, 5), op(2, 7, 30)];
        assert_eq!(contradicted(&ops), 0);
    }

    #[test]
    fn a_reissued_or_reordered_grant_is_counted() {
        // Token 9 acknowledged at t=20, then token 7 of the same key at t=30: a forgotten
        // grant was re-issued below it.
        assert_eq!(contradicted(&[op(1, 9, 20), op(1, 7, 30)]), 1);
        assert_eq!(contradicted(&[op(3, 4, 20), op(3, 4, 40)]), 1);
    }
}
