//! What makes a confirmation single-use: the replay stores and their shared conformance, store
//! faults, concurrent and cross-instance retries, Redis Cluster, stale approvals, restarts and
//! floods.

mod concurrency;
mod migrations;
mod multi_instance;
mod redis_cluster;
mod stale_restarts_floods;
mod standing_race;
mod store_faults;
mod stores;
