//! Latency as design/METRICS.md defines it: per-request metrics from a `Record`'s timing,
//! numpy-linear percentiles, load schedules, and noise-aware comparison with a baseline.
