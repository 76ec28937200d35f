//! What the machine offers, read once where a default depends on it.

/// The default memory budget of the PGA engine, the same in every front end: half of the
/// machine's physical memory (`MemTotal` in `/proc/meminfo`), or 4 GiB where that cannot be
/// read. The budget only sets how many null draws run at once; it never changes a number.
pub fn default_memory_budget() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|kb| kb.parse::<u64>().ok())
                })
        })
        .map_or(4 << 30, |kb| kb * 1024 / 2)
}
