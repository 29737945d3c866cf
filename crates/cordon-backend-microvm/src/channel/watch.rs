//! A watch in the guest, read on the host: the agent's `WatchEvent`
//! frames for one request, routed into a bounded queue (a guest that
//! floods it loses events to one `overflow`, never host memory), until its
//! `WatchEnd` or the channel's end. Dropping it asks the agent to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use cordon_sandbox::watch::MAX_PENDING;
use cordon_sandbox::{Next, WatchEvent, WatchSource};
use cordon_vm_proto::Msg;

use super::Channel;

/// What the reader hands a watch.
pub(super) enum WatchMsg {
    Event(WatchEvent),
    End(String),
}

/// A watch's route: its queue, and whether the queue was full.
pub(super) struct WatchRoute {
    to: SyncSender<WatchMsg>,
    lost: Arc<AtomicBool>,
}

impl WatchRoute {
    /// One event from the guest: queued, or (the queue full) lost.
    pub(super) fn event(&self, event: serde_json::Value) -> Result<(), String> {
        let e: WatchEvent = serde_json::from_value(event)
            .map_err(|e| format!("a watch event that is not one: {e}"))?;
        match self.to.try_send(WatchMsg::Event(e)) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => self.lost.store(true, Ordering::SeqCst),
        }
        Ok(())
    }

    pub(super) fn end(self, reason: String) {
        // The queue may be full: the end is then seen as the sender's drop.
        let _ = self.to.try_send(WatchMsg::End(reason));
    }
}

pub(crate) struct ChannelWatch {
    req: u64,
    from: Receiver<WatchMsg>,
    lost: Arc<AtomicBool>,
    channel: Weak<Channel>,
    ended: Option<String>,
}

pub(super) fn pair(req: u64, channel: &Arc<Channel>) -> (WatchRoute, ChannelWatch) {
    let (to, from) = sync_channel(MAX_PENDING);
    let lost = Arc::new(AtomicBool::new(false));
    (
        WatchRoute {
            to,
            lost: lost.clone(),
        },
        ChannelWatch {
            req,
            from,
            lost,
            channel: Arc::downgrade(channel),
            ended: None,
        },
    )
}

impl WatchSource for ChannelWatch {
    fn next(&mut self, wait: Duration) -> Next {
        if let Some(why) = &self.ended {
            return Next::Ended(why.clone());
        }
        if self.lost.swap(false, Ordering::SeqCst) {
            return Next::Event(WatchEvent::overflow());
        }
        match self.from.recv_timeout(wait) {
            Ok(WatchMsg::Event(e)) => Next::Event(e),
            Ok(WatchMsg::End(why)) => {
                self.ended = Some(why.clone());
                Next::Ended(why)
            }
            Err(RecvTimeoutError::Timeout) => Next::Quiet,
            Err(RecvTimeoutError::Disconnected) => {
                let why = self
                    .channel
                    .upgrade()
                    .and_then(|c| c.ended())
                    .map_or("the watch ended".to_string(), |w| {
                        format!("the VM is gone: {w}")
                    });
                self.ended = Some(why.clone());
                Next::Ended(why)
            }
        }
    }
}

impl Drop for ChannelWatch {
    fn drop(&mut self) {
        if self.ended.is_none() {
            if let Some(c) = self.channel.upgrade() {
                let _ = c.send(&Msg::WatchStop { req: self.req }, &[]);
            }
        }
    }
}
