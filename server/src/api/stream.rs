//! A bounded channel as a `Stream` (request and response streams of the gRPC services).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

/// The receiving end of a bounded channel as a stream: the sender's `send().await` waits while
/// the stream's consumer is slow, so the buffer never grows past the channel's capacity.
#[derive(Debug)]
pub struct ChannelStream<T> {
    rx: mpsc::Receiver<T>,
}

impl<T> ChannelStream<T> {
    pub fn new(rx: mpsc::Receiver<T>) -> ChannelStream<T> {
        ChannelStream { rx }
    }
}

impl<T> futures_core::Stream for ChannelStream<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.rx.poll_recv(cx)
    }
}
