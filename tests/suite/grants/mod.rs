//! Durable grants for queued work: worker processes racing and dying, the queued flow through the
//! layer, and the attacks on grants.

mod attacks;
mod demo_attacks;
mod processes;
mod queued;
