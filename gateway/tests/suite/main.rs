//! The gateway's integration tests, one binary (one link): in-process upstreams of the tests'
//! own, gateways built from files, and the real binary for the command line.

mod cli;
mod common;
mod gateway;
mod lookup;
mod metrics;
mod oauth;
mod options;
mod pages;
mod postgres;
mod recheck;
mod relay;
mod standing;
mod two_gateways;
