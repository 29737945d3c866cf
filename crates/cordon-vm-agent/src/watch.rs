//! Watches of the work dir in the guest: the same watcher the host uses
//! on a local sandbox's work dir (`cordon_files::watch`, inotify on the
//! directories opened beneath it), one thread each, its events sent as
//! `WatchEvent` frames until it ends or the host stops it (`WatchEnd`
//! either way).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_sandbox::Next;
use cordon_vm_proto::{ErrKind, Msg, MAX_WATCHES};

use crate::files::wire_error;
use crate::out::Out;

#[derive(Default, Clone)]
pub(crate) struct Watches {
    running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watches {
    pub(crate) fn start(
        &self,
        dir: cordon_files::roots::Roots<'_>,
        out: &Arc<Out>,
        req: u64,
        path: &str,
        recursive: bool,
    ) {
        let stop = Arc::new(AtomicBool::new(false));
        {
            let mut running = lock(&self.running);
            if running.len() >= MAX_WATCHES || running.contains_key(&req) {
                return out.error(
                    req,
                    ErrKind::Refused,
                    path,
                    &format!("{MAX_WATCHES} watches are open already (or this id is in use); stop one first"),
                );
            }
            running.insert(req, stop.clone());
        }
        let mut source = match dir.watch(path, recursive, None) {
            Ok(s) => s,
            Err(e) => {
                lock(&self.running).remove(&req);
                let (kind, path, message) = wire_error(&e, path);
                return out.error(req, kind, &path, &message);
            }
        };
        let (out, running) = (out.clone(), self.running.clone());
        std::thread::spawn(move || {
            let reason = loop {
                if stop.load(Ordering::SeqCst) {
                    break "stopped by the host".to_string();
                }
                match source.next(Duration::from_millis(250)) {
                    Next::Event(e) => {
                        let event = serde_json::to_value(&e).unwrap_or_default();
                        if !out.send(&Msg::WatchEvent { req, event }, &[]) {
                            break "the channel is gone".into();
                        }
                    }
                    Next::Quiet => {}
                    Next::Ended(why) => break why,
                }
            };
            lock(&running).remove(&req);
            out.send(&Msg::WatchEnd { req, reason }, &[]);
        });
    }

    pub(crate) fn stop(&self, req: u64) {
        if let Some(s) = lock(&self.running).get(&req) {
            s.store(true, Ordering::SeqCst);
        }
    }

    /// Every watch stops (the sandbox is torn down).
    pub(crate) fn stop_all(&self) {
        for s in lock(&self.running).values() {
            s.store(true, Ordering::SeqCst);
        }
    }
}
