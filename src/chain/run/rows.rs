//! What the per-row checks keep of a whole SFT file: a count per outcome and its first few
//! examples, in file order whatever the thread count.

/// How many examples of each outcome the tally keeps.
const KEEP: usize = 5;
/// How many rows showed an outcome, and the first few of them in file order.
#[derive(Debug)]
pub struct Examples<T> {
    pub count: usize,
    pub kept: Vec<T>,
}

impl<T> Default for Examples<T> {
    fn default() -> Self {
        Examples {
            count: 0,
            kept: Vec::new(),
        }
    }
}

impl<T> Examples<T> {
    pub fn push(&mut self, t: T) {
        self.count += 1;
        if self.kept.len() < KEEP {
            self.kept.push(t);
        }
    }
    pub fn first(&self) -> Option<&T> {
        self.kept.first()
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// `later` holds rows after this one's: its examples go after.
    pub fn merge(&mut self, later: Examples<T>) {
        self.count += later.count;
        let room = KEEP.saturating_sub(self.kept.len());
        self.kept.extend(later.kept.into_iter().take(room));
    }
}
