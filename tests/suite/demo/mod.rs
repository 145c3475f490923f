//! The notes server demo end to end over real HTTP: the rmcp server behind the layer, its tasks,
//! its attacks, and the Postgres transactional mode.

mod attacks;
pub(crate) mod cluster;
mod e2e;
mod postgres;
mod signin_attacks;
