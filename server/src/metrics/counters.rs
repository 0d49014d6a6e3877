//! Counters that live elsewhere (atomics of the peer transport, the session feed), read at
//! every scrape: [`CounterSource`] and the collector that encodes them.

use std::sync::{Arc, Mutex};

/// One counter read from a [`CounterSource`]: its name (without `_total`, which the encoding
/// adds), help, an optional label and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcedCounter {
    pub name: &'static str,
    pub help: &'static str,
    /// `(label, value)` of this series, for a counter of several series (written in the order
    /// given, under one descriptor while the name repeats).
    pub label: Option<(&'static str, &'static str)>,
    pub value: u64,
}

/// Something that keeps counters of its own (atomics) for `/metrics`.
pub trait CounterSource: std::fmt::Debug + Send + Sync {
    fn counters(&self) -> Vec<SourcedCounter>;
}

#[derive(Debug, Default)]
pub(super) struct CounterSources(pub(super) Mutex<Vec<Arc<dyn CounterSource>>>);

impl prometheus_client::collector::Collector for CounterSources {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        let sources = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for source in sources {
            let counters = source.counters();
            let mut at = 0;
            while at < counters.len() {
                let first = &counters[at];
                let same = counters[at..]
                    .iter()
                    .take_while(|c| c.name == first.name)
                    .count();
                let counter = ConstCounter::new(first.value);
                let mut family = encoder.encode_descriptor(
                    first.name,
                    first.help,
                    None,
                    counter.metric_type(),
                )?;
                if first.label.is_none() {
                    // One series without labels (a repeat of the name would be a second source).
                    counter.encode(family)?;
                    at += 1;
                    continue;
                }
                for series in &counters[at..at + same] {
                    let label = [series.label.unwrap_or(("", ""))];
                    ConstCounter::new(series.value).encode(family.encode_family(&label)?)?;
                }
                at += same;
            }
        }
        Ok(())
    }
}
