//! A probe's result kept once per process for each engine settings it was
//! made with: a process normally holds one (its owner's, or the settings a
//! keeper was given), a test may hold several, and a result is never
//! answered for settings it was not made with.

use std::sync::Mutex;

/// Results by settings; see the module's doc.
pub struct PerSettings<K: 'static, V: 'static> {
    made: Mutex<Vec<(K, &'static V)>>,
}

impl<K: PartialEq + Clone + 'static, V: 'static> PerSettings<K, V> {
    pub const fn new() -> PerSettings<K, V> {
        PerSettings {
            made: Mutex::new(Vec::new()),
        }
    }

    /// The result for `settings`, made by `make` the first time (one at a
    /// time: a second caller with the same settings waits for the first).
    pub fn get_or_make(&'static self, settings: &K, make: impl FnOnce(&K) -> V) -> &'static V {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, v)) = made.iter().find(|(k, _)| k == settings) {
            return v;
        }
        // Kept for the process's life, as a `OnceLock` would keep one.
        let v: &'static V = Box::leak(Box::new(make(settings)));
        made.push((settings.clone(), v));
        v
    }

    /// The result for `settings` when it was made already.
    pub fn made(&'static self, settings: &K) -> Option<&'static V> {
        let made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        made.iter().find(|(k, _)| k == settings).map(|(_, v)| *v)
    }
}

impl<K: PartialEq + Clone + 'static, V: 'static> Default for PerSettings<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_made_once_per_settings_and_never_answered_for_others() {
        static M: PerSettings<String, String> = PerSettings::new();
        let made = std::cell::Cell::new(0);
        let mut make = |k: &String| {
            made.set(made.get() + 1);
            format!("for {k}")
        };
        assert_eq!(M.get_or_make(&"a".into(), &mut make), "for a");
        assert_eq!(M.get_or_make(&"a".into(), &mut make), "for a");
        assert_eq!(M.made(&"b".into()), None);
        assert_eq!(M.get_or_make(&"b".into(), &mut make), "for b");
        assert_eq!(made.get(), 2);
    }
}
